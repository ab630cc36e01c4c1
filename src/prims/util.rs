//! Helpers shared by the primitives' rules: row-major index arithmetic, dtype-generic
//! data movement, and the checks that several type rules make.
//!
//! Layout and indexing primitives evaluate as a *gather*: compute, for every output
//! position, the flat position it reads from, then [`take`] those elements. That keeps
//! the per-dtype code in one place instead of in every primitive.

use crate::array::{Array, ArrayTy, DType, Data};

/// Row-major strides of a shape (the last dimension is contiguous).
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// The multi-index of flat position `flat` in a row-major array of `shape`.
pub fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        if shape[d] > 0 {
            idx[d] = flat % shape[d];
            flat /= shape[d];
        }
    }
    idx
}

/// The flat position of a multi-index, given the array's strides.
pub fn ravel(idx: &[usize], strides: &[usize]) -> usize {
    idx.iter().zip(strides).map(|(i, s)| i * s).sum()
}

/// Every multi-index of `shape`, in row-major order.
pub fn indices(shape: &[usize]) -> impl Iterator<Item = Vec<usize>> + '_ {
    (0..shape.iter().product()).map(move |f| unravel(f, shape))
}

/// The elements of `data` at `positions`, in that order.
pub fn take(data: &Data, positions: &[usize]) -> Data {
    fn pick<T: Copy>(v: &[T], p: &[usize]) -> Vec<T> {
        p.iter().map(|&i| v[i]).collect()
    }
    match data {
        Data::F32(v) => Data::F32(pick(v, positions)),
        Data::I32(v) => Data::I32(pick(v, positions)),
        Data::U32(v) => Data::U32(pick(v, positions)),
        Data::U8(v) => Data::U8(pick(v, positions)),
        Data::Bool(v) => Data::Bool(pick(v, positions)),
    }
}

/// The elements of several arrays of one dtype, one after the other. Used to gather
/// from more than one source (concatenate, dynamic_update_slice).
pub fn concat_data(parts: &[&Data]) -> Data {
    fn join<T: Copy>(parts: &[&Data], get: impl Fn(&Data) -> &[T]) -> Vec<T> {
        parts.iter().flat_map(|p| get(p).iter().copied()).collect()
    }
    fn mismatch() -> ! {
        panic!("concat_data: parts of different dtypes")
    }
    match parts.first() {
        None | Some(Data::F32(_)) => Data::F32(join(parts, |p| match p {
            Data::F32(v) => v,
            Data::I32(_) | Data::U32(_) | Data::U8(_) | Data::Bool(_) => mismatch(),
        })),
        Some(Data::I32(_)) => Data::I32(join(parts, |p| match p {
            Data::I32(v) => v,
            Data::F32(_) | Data::U32(_) | Data::U8(_) | Data::Bool(_) => mismatch(),
        })),
        Some(Data::U32(_)) => Data::U32(join(parts, |p| match p {
            Data::U32(v) => v,
            Data::F32(_) | Data::I32(_) | Data::U8(_) | Data::Bool(_) => mismatch(),
        })),
        Some(Data::U8(_)) => Data::U8(join(parts, |p| match p {
            Data::U8(v) => v,
            Data::F32(_) | Data::I32(_) | Data::U32(_) | Data::Bool(_) => mismatch(),
        })),
        Some(Data::Bool(_)) => Data::Bool(join(parts, |p| match p {
            Data::Bool(v) => v,
            Data::F32(_) | Data::I32(_) | Data::U32(_) | Data::U8(_) => mismatch(),
        })),
    }
}

/// The value of an i32 scalar (a dynamic index).
pub fn scalar_i32(a: &Array) -> i32 {
    match &a.data {
        Data::I32(v) if v.len() == 1 => v[0],
        Data::I32(_) | Data::F32(_) | Data::U32(_) | Data::U8(_) | Data::Bool(_) => {
            panic!("expected an i32 scalar, got {}", a.ty())
        }
    }
}

/// XLA's clamp of a run-time start: the window `[start, start + size)` is moved inside
/// `[0, dim)`.
pub fn clamp_start(start: i32, dim: usize, size: usize) -> usize {
    let max = i64::try_from(dim - size).unwrap_or(i64::MAX);
    i64::from(start).clamp(0, max) as usize
}

/// Checks the number of arguments a type rule receives.
pub fn expect_arity(name: &str, args: &[ArrayTy], n: usize) -> Result<(), String> {
    if args.len() == n { Ok(()) } else { Err(format!("{name} takes {n} argument(s), got {}", args.len())) }
}

/// Checks that `axes` are distinct dimensions of a rank-`rank` array.
pub fn check_axes(name: &str, what: &str, axes: &[usize], rank: usize) -> Result<(), String> {
    for (k, &a) in axes.iter().enumerate() {
        if a >= rank {
            return Err(format!("{name}: {what} {a} is out of range for rank {rank}"));
        }
        if axes[..k].contains(&a) {
            return Err(format!("{name}: {what} {a} appears twice"));
        }
    }
    Ok(())
}

/// Checks that an argument is an i32 scalar (dynamic start indices).
pub fn expect_index(name: &str, t: &ArrayTy) -> Result<(), String> {
    if t.dtype == DType::I32 && t.shape.is_empty() {
        Ok(())
    } else {
        Err(format!("{name}: start indices must be i32 scalars, got {t}"))
    }
}

/// `[a, b, c]`: a list of dimension numbers for attribute text.
pub fn list(xs: &[usize]) -> String {
    let items: Vec<String> = xs.iter().map(|x| x.to_string()).collect();
    format!("[{}]", items.join(", "))
}

/// `array<i64: a, b, c>`: a dimension list as a StableHLO dense-array attribute.
pub fn i64_array(xs: &[usize]) -> String {
    if xs.is_empty() {
        return "array<i64>".to_string();
    }
    let items: Vec<String> = xs.iter().map(|x| x.to_string()).collect();
    format!("array<i64: {}>", items.join(", "))
}
