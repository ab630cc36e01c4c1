//! Constructors for the primitives with many attributes, shared by the primitive tables.

use podracer::prims::{Conv, Gather, Prim, Scatter, SelectAndGatherAdd, SelectAndScatterAdd, WindowMax, Windows};

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

/// Convolutions that reach every branch of the conv rules, with their operand shapes:
/// NHWC/HWIO as `conv2d` makes them, strided and padded (negative padding crops), other
/// layouts, dilations, and both kinds of groups (what batching and the derivatives make).
pub fn convs() -> Vec<(&'static str, Prim, Vec<usize>, Vec<usize>)> {
    let conv = |lhs: [usize; 4],
                rhs: [usize; 4],
                out: [usize; 4],
                strides,
                padding,
                dil: ([usize; 2], [usize; 2]),
                g: (usize, usize)| {
        Prim::Conv(Conv {
            lhs_spec: lhs.to_vec(),
            rhs_spec: rhs.to_vec(),
            out_spec: out.to_vec(),
            strides: Vec::from(strides),
            padding: Vec::from(padding),
            lhs_dilation: dil.0.to_vec(),
            rhs_dilation: dil.1.to_vec(),
            feature_groups: g.0,
            batch_groups: g.1,
        })
    };
    let (nhwc, hwio) = ([0, 3, 1, 2], [3, 2, 0, 1]);
    let plain = ([1, 1], [1, 1]);
    vec![
        (
            "conv nhwc",
            conv(nhwc, hwio, nhwc, [1, 1], [(0, 0), (0, 0)], plain, (1, 1)),
            vec![2, 4, 5, 3],
            vec![2, 3, 3, 2],
        ),
        (
            "conv strided, padded",
            conv(nhwc, hwio, nhwc, [2, 3], [(1, 0), (2, 1)], plain, (1, 1)),
            vec![1, 5, 4, 2],
            vec![3, 2, 2, 3],
        ),
        (
            "conv nchw, oihw, negative padding",
            conv([0, 1, 2, 3], [0, 1, 2, 3], [0, 1, 2, 3], [1, 2], [(-1, 1), (0, -1)], plain, (1, 1)),
            vec![2, 2, 5, 6],
            vec![3, 2, 2, 2],
        ),
        (
            "conv dilated",
            conv(nhwc, hwio, nhwc, [1, 2], [(1, 2), (0, 1)], ([2, 1], [1, 2]), (1, 1)),
            vec![1, 3, 5, 2],
            vec![2, 2, 2, 2],
        ),
        (
            "conv feature groups",
            conv(nhwc, hwio, nhwc, [1, 1], [(1, 1), (0, 0)], plain, (2, 1)),
            vec![2, 3, 4, 4],
            vec![2, 2, 2, 6],
        ),
        (
            "conv batch groups",
            conv(nhwc, hwio, nhwc, [2, 1], [(0, 1), (1, 0)], plain, (1, 2)),
            vec![4, 4, 3, 2],
            vec![2, 2, 2, 4],
        ),
    ]
}

/// Max-pooling windows over `[H, W, C]` operands, with their operand shapes.
pub fn pools() -> Vec<(&'static str, Windows, Vec<usize>)> {
    let w = |window: [usize; 3], strides: [usize; 3], padding: [(usize, usize); 3]| Windows {
        window: window.to_vec(),
        strides: strides.to_vec(),
        padding: padding.to_vec(),
    };
    vec![
        ("pool 2x2/2", w([2, 2, 1], [2, 2, 1], [(0, 0), (0, 0), (0, 0)]), vec![4, 5, 2]),
        ("pool 3x3/2 padded", w([3, 3, 1], [2, 2, 1], [(1, 1), (0, 2), (0, 0)]), vec![5, 4, 2]),
        ("pool 3x2/1 overlapping", w([3, 2, 1], [1, 1, 1], [(1, 1), (1, 0), (0, 0)]), vec![3, 4, 1]),
    ]
}

/// `reduce_window_max` over these windows.
pub fn window_max(w: &Windows) -> Prim {
    Prim::WindowMax(WindowMax { windows: w.clone() })
}

/// `select_and_scatter_add` over these windows.
pub fn select_and_scatter_add(w: &Windows) -> Prim {
    Prim::SelectAndScatterAdd(SelectAndScatterAdd { windows: w.clone() })
}

/// `select_and_gather_add` over these windows.
pub fn select_and_gather_add(w: &Windows) -> Prim {
    Prim::SelectAndGatherAdd(SelectAndGatherAdd { windows: w.clone() })
}
