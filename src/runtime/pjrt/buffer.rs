//! Device buffers and the host transfers between them and [`Array`]s.

use std::fmt;
use std::sync::Arc;

use super::ffi::{BufferHandle, ClientHandle, element_type};
use crate::array::{Array, ArrayTy, DType};
use crate::runtime::{Result, RuntimeError};

/// An array on a device. Dropping it frees the device memory.
///
/// May be shared between threads (e.g. passed to executions running on several threads).
pub struct Buffer {
    handle: BufferHandle,
    ty: ArrayTy,
    device: usize,
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Buffer({} on device {})", self.ty, self.device)
    }
}

impl Buffer {
    /// Copies `array` to device `device` of `client`.
    pub(crate) fn upload(client: &Arc<ClientHandle>, array: &Array, device: usize) -> Result<Buffer> {
        let ty = array.ty();
        if array.data.len() != ty.numel() {
            return Err(RuntimeError::Usage(format!(
                "the array has {} elements but its shape {:?} needs {}",
                array.data.len(),
                ty.shape,
                ty.numel()
            )));
        }
        let dims = ty
            .shape
            .iter()
            .map(|&d| i64::try_from(d))
            .collect::<std::result::Result<Vec<i64>, _>>()
            .map_err(|_| RuntimeError::Usage(format!("shape {:?} is too large", ty.shape)))?;
        let bytes = array.to_bytes();
        let handle = client.buffer_from_host(&bytes, element_type_of(ty.dtype), &dims, device)?;
        Ok(Buffer { handle, ty, device })
    }

    /// Wraps a buffer the plugin made (an execution output) on device `device`, reading
    /// its type from the plugin.
    pub(crate) fn from_handle(handle: BufferHandle, device: usize) -> Result<Buffer> {
        let code = handle.element_type()?;
        let dtype = dtype_of(code)?;
        let shape = handle
            .dims()?
            .into_iter()
            .map(usize::try_from)
            .collect::<std::result::Result<Vec<usize>, _>>()
            .map_err(|_| RuntimeError::UnsupportedType("a buffer with a negative dimension".into()))?;
        Ok(Buffer { handle, ty: ArrayTy::new(dtype, shape), device })
    }

    pub(crate) fn handle(&self) -> &BufferHandle {
        &self.handle
    }

    /// The array type: dtype and shape.
    pub fn ty(&self) -> &ArrayTy {
        &self.ty
    }

    /// The index of the device holding the buffer.
    pub fn device(&self) -> usize {
        self.device
    }

    /// Copies the buffer to the host, waiting for any computation producing it.
    pub fn download(&self) -> Result<Array> {
        let mut bytes = vec![0u8; self.ty.numel() * self.ty.dtype.size()];
        self.handle.to_host(&mut bytes, self.ty.rank())?;
        Array::from_bytes(&self.ty, &bytes)
            .ok_or_else(|| RuntimeError::Usage(format!("downloaded bytes do not fit {}", self.ty)))
    }
}

/// The XLA element type of a podracer dtype.
fn element_type_of(dtype: DType) -> i32 {
    match dtype {
        DType::F32 => element_type::F32,
        DType::I32 => element_type::S32,
        DType::U32 => element_type::U32,
        DType::U8 => element_type::U8,
        DType::Bool => element_type::PRED,
    }
}

/// The podracer dtype of an XLA element type.
fn dtype_of(code: i32) -> Result<DType> {
    match code {
        element_type::F32 => Ok(DType::F32),
        element_type::S32 => Ok(DType::I32),
        element_type::U32 => Ok(DType::U32),
        element_type::U8 => Ok(DType::U8),
        element_type::PRED => Ok(DType::Bool),
        other => Err(RuntimeError::UnsupportedType(element_type::name(other))),
    }
}
