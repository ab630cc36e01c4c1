//! Constructors for the primitives with many attributes, shared by the primitive tables.

use podracer::prims::{Gather, Prim, Scatter};

/// A `Gather`: offset and collapsed dims, (operand, indices) batching dims, the start
/// index map and the slice sizes.
pub fn gather(
    offset: &[usize],
    collapsed: &[usize],
    batching: (&[usize], &[usize]),
    map: &[usize],
    sizes: &[usize],
) -> Prim {
    Prim::Gather(Gather {
        offset_dims: offset.to_vec(),
        collapsed_slice_dims: collapsed.to_vec(),
        operand_batching_dims: batching.0.to_vec(),
        indices_batching_dims: batching.1.to_vec(),
        start_index_map: map.to_vec(),
        slice_sizes: sizes.to_vec(),
    })
}

/// A `Scatter`: update window dims, inserted window dims, (operand, indices) batching dims
/// and the map from index vector to operand dims.
pub fn scatter(window: &[usize], inserted: &[usize], batching: (&[usize], &[usize]), map: &[usize]) -> Prim {
    Prim::Scatter(Scatter {
        update_window_dims: window.to_vec(),
        inserted_window_dims: inserted.to_vec(),
        operand_batching_dims: batching.0.to_vec(),
        indices_batching_dims: batching.1.to_vec(),
        scatter_dims_to_operand_dims: map.to_vec(),
    })
}
