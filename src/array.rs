//! Host arrays: the values that the reference interpreter computes, that the runtime
//! uploads and downloads, and that `--args`/`--json` read and print.

use std::fmt;

/// Element types. Every array in the IR has one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    I32,
    U32,
    /// Bytes: pixels and other 0..=255 data, arithmetic wrapping mod 256 as JAX's `uint8`.
    U8,
    Bool,
}

impl DType {
    /// Every dtype, in the order messages list them.
    pub const ALL: [DType; 5] = [DType::F32, DType::I32, DType::U32, DType::U8, DType::Bool];

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::U8 => "u8",
            DType::Bool => "bool",
        }
    }

    pub fn from_name(name: &str) -> Option<DType> {
        match name {
            "f32" => Some(DType::F32),
            "i32" => Some(DType::I32),
            "u32" => Some(DType::U32),
            "u8" => Some(DType::U8),
            "bool" => Some(DType::Bool),
            _ => None,
        }
    }

    /// Bytes per element on the device (bool is one byte, as in XLA's PRED).
    pub fn size(self) -> usize {
        match self {
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::U8 | DType::Bool => 1,
        }
    }

    pub fn is_float(self) -> bool {
        self == DType::F32
    }

    pub fn is_int(self) -> bool {
        matches!(self, DType::I32 | DType::U32 | DType::U8)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The type of an array: dtype and concrete shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ArrayTy {
    pub dtype: DType,
    pub shape: Vec<usize>,
}

impl ArrayTy {
    pub fn new(dtype: DType, shape: Vec<usize>) -> ArrayTy {
        ArrayTy { dtype, shape }
    }

    pub fn scalar(dtype: DType) -> ArrayTy {
        ArrayTy { dtype, shape: vec![] }
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

impl fmt::Display for ArrayTy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.dtype)?;
        if !self.shape.is_empty() {
            let dims: Vec<String> = self.shape.iter().map(|d| d.to_string()).collect();
            write!(f, "[{}]", dims.join(", "))?;
        }
        Ok(())
    }
}

/// Row-major element storage, one variant per dtype.
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    F32(Vec<f32>),
    I32(Vec<i32>),
    U32(Vec<u32>),
    U8(Vec<u8>),
    Bool(Vec<bool>),
}

/// A dense array on the host.
#[derive(Clone, Debug, PartialEq)]
pub struct Array {
    pub shape: Vec<usize>,
    pub data: Data,
}

impl Array {
    pub fn new(shape: Vec<usize>, data: Data) -> Array {
        debug_assert_eq!(shape.iter().product::<usize>(), data.len());
        Array { shape, data }
    }

    pub fn f32(shape: Vec<usize>, v: Vec<f32>) -> Array {
        Array::new(shape, Data::F32(v))
    }

    pub fn i32(shape: Vec<usize>, v: Vec<i32>) -> Array {
        Array::new(shape, Data::I32(v))
    }

    pub fn dtype(&self) -> DType {
        match self.data {
            Data::F32(_) => DType::F32,
            Data::I32(_) => DType::I32,
            Data::U32(_) => DType::U32,
            Data::U8(_) => DType::U8,
            Data::Bool(_) => DType::Bool,
        }
    }

    pub fn ty(&self) -> ArrayTy {
        ArrayTy::new(self.dtype(), self.shape.clone())
    }

    /// All-zero (false) array of a type.
    pub fn zeros(ty: &ArrayTy) -> Array {
        let n = ty.numel();
        let data = match ty.dtype {
            DType::F32 => Data::F32(vec![0.0; n]),
            DType::I32 => Data::I32(vec![0; n]),
            DType::U32 => Data::U32(vec![0; n]),
            DType::U8 => Data::U8(vec![0; n]),
            DType::Bool => Data::Bool(vec![false; n]),
        };
        Array::new(ty.shape.clone(), data)
    }

    /// Little-endian bytes as the device stores them.
    pub fn to_bytes(&self) -> Vec<u8> {
        match &self.data {
            Data::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Data::I32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Data::U32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Data::U8(v) => v.clone(),
            Data::Bool(v) => v.iter().map(|&b| b as u8).collect(),
        }
    }

    /// `n` copies of this array along a new leading axis (rows for [`Array::set_row`]).
    pub fn stacked(&self, n: usize) -> Array {
        let ty = self.ty();
        let ty = ArrayTy::new(ty.dtype, std::iter::once(n).chain(ty.shape).collect());
        Array::from_bytes(&ty, &self.to_bytes().repeat(n)).expect("n rows of the array's size")
    }

    /// Replaces row `i` along the leading axis with `row`, an array of one row's shape and
    /// this array's dtype.
    pub fn set_row(&mut self, i: usize, row: &Array) {
        fn put<T: Copy>(to: &mut [T], i: usize, from: &[T]) {
            to[i * from.len()..(i + 1) * from.len()].copy_from_slice(from);
        }
        assert_eq!(self.shape[1..], row.shape, "set_row: a row's shape");
        match (&mut self.data, &row.data) {
            (Data::F32(a), Data::F32(b)) => put(a, i, b),
            (Data::I32(a), Data::I32(b)) => put(a, i, b),
            (Data::U32(a), Data::U32(b)) => put(a, i, b),
            (Data::U8(a), Data::U8(b)) => put(a, i, b),
            (Data::Bool(a), Data::Bool(b)) => put(a, i, b),
            _ => panic!("set_row: the row's dtype differs"),
        }
    }

    /// Inverse of [`Array::to_bytes`]; `None` when the byte count does not fit the type.
    pub fn from_bytes(ty: &ArrayTy, bytes: &[u8]) -> Option<Array> {
        if bytes.len() != ty.numel() * ty.dtype.size() {
            return None;
        }
        let word = |c: &[u8]| [c[0], c[1], c[2], c[3]];
        let data = match ty.dtype {
            DType::F32 => Data::F32(bytes.chunks_exact(4).map(|c| f32::from_le_bytes(word(c))).collect()),
            DType::I32 => Data::I32(bytes.chunks_exact(4).map(|c| i32::from_le_bytes(word(c))).collect()),
            DType::U32 => Data::U32(bytes.chunks_exact(4).map(|c| u32::from_le_bytes(word(c))).collect()),
            DType::U8 => Data::U8(bytes.to_vec()),
            DType::Bool => Data::Bool(bytes.iter().map(|&b| b != 0).collect()),
        };
        Some(Array::new(ty.shape.clone(), data))
    }
}

impl Data {
    pub fn len(&self) -> usize {
        match self {
            Data::F32(v) => v.len(),
            Data::I32(v) => v.len(),
            Data::U32(v) => v.len(),
            Data::U8(v) => v.len(),
            Data::Bool(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
