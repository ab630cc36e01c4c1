//! Independent threefry hashes of one graph, hashed as one.
//!
//! A training step hashes many times: the driver's key splits, each environment's sample
//! of the policy, each reset's draw. Every hash lowers to a loop ([`Threefry`]'s
//! lowering), and every loop costs the runtime a fixed price per trip and the compiler its
//! kernels, whatever its size. So hashes whose operands do not depend on one another's
//! results are joined before lowering: their keys and counters concatenated, one hash,
//! its results sliced back into the values the uses read. Each element's bits are those
//! of its own hash, as `jax.random.split` hashes all its counters in one call.
//!
//! Hashes are grouped by depth: a hash's depth is one more than that of the deepest hash
//! its operands depend on. Two hashes of one depth never depend on each other, and with
//! each group taken as one node the graph stays acyclic (an edge between groups always
//! goes deeper), so the equations can be ordered again, each group where its last
//! operand is ready. A loop body is a graph of its own, merged on its own.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};

use super::{Eqn, Func, Graph, Op, Var, emit};
use crate::array::ArrayTy;
use crate::prims::{Broadcast, Concat, Prim, Reshape, Slice, Threefry};

/// Joins the independent hashes of every graph of `f`.
pub fn merge_hashes(f: &mut Func) {
    let mut graph = std::mem::take(&mut f.graph);
    merge_graph(f, &mut graph);
    f.graph = graph;
}

fn is_hash(f: &Func, e: &Eqn) -> bool {
    matches!(e.op, Op::Prim(Prim::Threefry(_))) && f.ty(e.args[2]).numel() > 0
}

fn merge_graph(f: &mut Func, g: &mut Graph) {
    for e in &mut g.eqns {
        if let Op::Loop { body, .. } = &mut e.op {
            merge_graph(f, body);
        }
    }
    // The depth of the deepest hash each value depends on (0: none), and the hashes by depth.
    let mut depth: HashMap<Var, usize> = HashMap::new();
    let mut by_depth: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (i, e) in g.eqns.iter().enumerate() {
        let mut d = e.args.iter().map(|a| depth.get(a).copied().unwrap_or(0)).max().unwrap_or(0);
        if is_hash(f, e) {
            d += 1;
            by_depth.entry(d).or_default().push(i);
        }
        depth.extend(e.outs.iter().map(|&o| (o, d)));
    }
    let groups: Vec<Vec<usize>> = by_depth.into_values().filter(|m| m.len() > 1).collect();
    if groups.is_empty() {
        return;
    }

    // Nodes: one per equation, except that a group's members share the group's node.
    let n = g.eqns.len();
    let mut node: Vec<usize> = (0..n).collect();
    for (j, members) in groups.iter().enumerate() {
        for &i in members {
            node[i] = n + j;
        }
    }
    // A node's place in the order it is emitted in, when ready: its equation's, or its
    // group's last member's.
    let mut rank: Vec<usize> = (0..n).collect();
    rank.extend(groups.iter().map(|m| *m.last().expect("a group has members")));
    let producer: HashMap<Var, usize> =
        g.eqns.iter().enumerate().flat_map(|(i, e)| e.outs.iter().map(move |&o| (o, i))).collect();
    let mut succs: Vec<Vec<usize>> = vec![vec![]; n + groups.len()];
    let mut waiting = vec![0usize; n + groups.len()];
    for (i, e) in g.eqns.iter().enumerate() {
        let mut preds: Vec<usize> = e.args.iter().filter_map(|a| producer.get(a)).map(|&p| node[p]).collect();
        preds.sort_unstable();
        preds.dedup();
        for p in preds.into_iter().filter(|&p| p != node[i]) {
            succs[p].push(node[i]);
            waiting[node[i]] += 1;
        }
    }
    let mut nodes: Vec<usize> = node.clone();
    nodes.sort_unstable();
    nodes.dedup();
    let mut ready: BinaryHeap<Reverse<(usize, usize)>> =
        nodes.iter().filter(|&&v| waiting[v] == 0).map(|&v| Reverse((rank[v], v))).collect();
    let mut order = vec![];
    while let Some(Reverse((_, v))) = ready.pop() {
        order.push(v);
        for &s in &succs[v] {
            waiting[s] -= 1;
            if waiting[s] == 0 {
                ready.push(Reverse((rank[s], s)));
            }
        }
    }
    assert_eq!(order.len(), nodes.len(), "internal compiler error: merging hashes made a cycle");
    let mut eqns: Vec<Option<Eqn>> = std::mem::take(&mut g.eqns).into_iter().map(Some).collect();
    for v in order {
        if v < n {
            g.eqns.push(eqns[v].take().expect("each equation once"));
        } else {
            let members: Vec<Eqn> =
                groups[v - n].iter().map(|&i| eqns[i].take().expect("each equation once")).collect();
            g.eqns.extend(joined(f, &members));
        }
    }
}

/// One hash for the `members`' hashes, then its results sliced back out into the vars
/// the members defined. Members of one key (the halves of a split) join their counters
/// after the key's dimensions, so the key keeps its shape; members of different keys
/// spread each key over its counters, and everything is joined flat.
fn joined(f: &mut Func, members: &[Eqn]) -> Vec<Eqn> {
    let mut out = vec![];
    let one_key = members.iter().all(|e| e.args[..2] == members[0].args[..2]);
    let lead: Vec<usize> = if one_key { f.ty(members[0].args[0]).shape.clone() } else { vec![] };
    let axis = lead.len();
    let (mut keys, mut counters): ([Vec<Var>; 2], [Vec<Var>; 2]) = Default::default();
    let mut sizes = vec![];
    for e in members {
        let shape = f.ty(e.args[2]).shape.clone();
        let size: usize = shape[axis..].iter().product();
        let flat: Vec<usize> = lead.iter().copied().chain([size]).collect();
        for w in 0..2 {
            counters[w].push(reshaped(f, &mut out, e.args[2 + w], &flat));
            if !one_key {
                let k = e.args[w];
                let spread = if f.ty(k).shape == shape {
                    k
                } else {
                    let dims = (0..f.ty(k).rank()).collect();
                    emit(f, &mut out, Prim::Broadcast(Broadcast { shape: shape.clone(), dims }), &[k], None)
                };
                keys[w].push(reshaped(f, &mut out, spread, &flat));
            }
        }
        sizes.push(size);
    }
    let mut concat = |f: &mut Func, vars: &[Var]| emit(f, &mut out, Prim::Concat(Concat { axis }), vars, None);
    let (k0, k1) =
        if one_key { (members[0].args[0], members[0].args[1]) } else { (concat(f, &keys[0]), concat(f, &keys[1])) };
    let (x0, x1) = (concat(f, &counters[0]), concat(f, &counters[1]));
    let hashed = [k0, k1, x0, x1];
    let tys: Vec<ArrayTy> = hashed.iter().map(|&v| f.ty(v).clone()).collect();
    let hash = Prim::Threefry(Threefry);
    let outs = hash.rules().infer(&tys).unwrap_or_else(|e| panic!("internal compiler error: merging hashes: {e}"));
    let ys: Vec<Var> = outs.into_iter().map(|t| f.fresh(t)).collect();
    out.push(Eqn { outs: ys.clone(), op: Op::Prim(hash), args: hashed.to_vec() });
    let mut offset = 0;
    for (e, size) in members.iter().zip(sizes) {
        for (&y, &target) in ys.iter().zip(&e.outs) {
            let (mut start, mut limit) = (vec![0; axis], lead.clone());
            start.push(offset);
            limit.push(offset + size);
            let slice = Prim::Slice(Slice { start, limit });
            if f.ty(target).shape.len() == axis + 1 {
                emit(f, &mut out, slice, &[y], Some(target));
            } else {
                let piece = emit(f, &mut out, slice, &[y], None);
                let shape = f.ty(target).shape.clone();
                emit(f, &mut out, Prim::Reshape(Reshape { shape }), &[piece], Some(target));
            }
        }
        offset += size;
    }
    out
}

/// `v` reshaped to `shape` (itself if it has that shape).
fn reshaped(f: &mut Func, out: &mut Vec<Eqn>, v: Var, shape: &[usize]) -> Var {
    if f.ty(v).shape == shape {
        return v;
    }
    emit(f, out, Prim::Reshape(Reshape { shape: shape.to_vec() }), &[v], None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::array::{Array, DType, Data};
    use crate::ir::build::Builder;
    use crate::ir::eval::eval_func;
    use crate::ir::verify::verify;
    use crate::prims::{Binary, BinaryOp};

    fn u32t(shape: &[usize]) -> ArrayTy {
        ArrayTy::new(DType::U32, shape.to_vec())
    }

    /// Distinct, irregular words of a shape.
    fn words(shape: &[usize], seed: u32) -> Array {
        let n: usize = shape.iter().product();
        let data = (0..n as u32).map(|i| i.wrapping_mul(0x9E37_79B9).wrapping_add(seed.wrapping_mul(0x85EB_CA6B)));
        Array::new(shape.to_vec(), Data::U32(data.collect()))
    }

    fn hash(b: &mut Builder, k0: Var, k1: Var, x0: Var, x1: Var) -> (Var, Var) {
        let ys = b.prim(Prim::Threefry(Threefry), &[k0, k1, x0, x1]);
        (ys[0], ys[1])
    }

    fn xor(b: &mut Builder, x: Var, y: Var) -> Var {
        b.prim1(Prim::Binary(Binary { op: BinaryOp::Xor }), &[x, y])
    }

    /// The hashes left in `g`, loop bodies included: (at top level, inside loops).
    fn hashes(g: &Graph) -> (usize, usize) {
        g.eqns.iter().fold((0, 0), |(top, inner), e| match &e.op {
            Op::Prim(Prim::Threefry(_)) => (top + 1, inner),
            Op::Loop { body, .. } => {
                let (t, i) = hashes(body);
                (top, inner + t + i)
            }
            Op::Prim(_) => (top, inner),
        })
    }

    /// Merges `f`'s hashes and checks that it still verifies and computes the same bits.
    fn merged(f: &Func, args: &[Array]) -> Func {
        let mut m = f.clone();
        merge_hashes(&mut m);
        verify(&m).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(eval_func(&m, args), eval_func(f, args));
        m
    }

    /// Random inputs for `f`'s parameters.
    fn inputs(f: &Func) -> Vec<Array> {
        f.graph.params.iter().enumerate().map(|(i, &p)| words(&f.ty(p).shape, i as u32 + 1)).collect()
    }

    /// Hashes of one depth join whatever their keys: a split's halves (one scalar key),
    /// another scalar key, keys over rows; a use of one hash's bits between them moves
    /// after the joined hash. Hashes keyed by those bits join each other one level down,
    /// and the halves of one key keep the key's shape.
    #[test]
    fn hashes_of_one_depth_join() {
        let mut b = Builder::new();
        let (k0, k1, j0, j1) = (b.fresh(u32t(&[])), b.fresh(u32t(&[])), b.fresh(u32t(&[])), b.fresh(u32t(&[])));
        let (r0, r1) = (b.fresh(u32t(&[4])), b.fresh(u32t(&[4])));
        let (a, c, d) = (b.fresh(u32t(&[3])), b.fresh(u32t(&[2, 2])), b.fresh(u32t(&[4, 3])));
        let (ya, za) = hash(&mut b, k0, k1, a, a);
        let used = xor(&mut b, ya, za);
        let (yc, zc) = hash(&mut b, k0, k1, c, c);
        let (yj, zj) = hash(&mut b, j0, j1, a, a);
        let (yr, zr) = hash(&mut b, r0, r1, d, d);
        // One level down: keys from the bits above, two hashes of the same key.
        let key = |b: &mut Builder, v: Var, i: usize| {
            let w = b.prim1(Prim::Slice(Slice { start: vec![i], limit: vec![i + 1] }), &[v]);
            b.prim1(Prim::Reshape(Reshape { shape: vec![] }), &[w])
        };
        let (n0, n1) = (key(&mut b, ya, 0), key(&mut b, za, 1));
        let (ye, ze) = hash(&mut b, n0, n1, d, d);
        let (yf, zf) = hash(&mut b, n0, n1, c, c);
        let params = vec![k0, k1, j0, j1, r0, r1, a, c, d];
        let f = b.finish("hashes", params, vec![used, yc, zc, yj, zj, yr, zr, ye, ze, yf, zf]);
        assert_eq!(hashes(&f.graph), (6, 0));
        let m = merged(&f, &inputs(&f));
        assert_eq!(hashes(&m.graph), (2, 0));
        // The second hash is keyed by scalars still: its counters joined as [4 * 3 + 2 * 2].
        let last = m.graph.eqns.iter().rev().find(|e| matches!(e.op, Op::Prim(Prim::Threefry(_)))).unwrap();
        assert_eq!(m.ty(last.args[0]).shape, Vec::<usize>::new());
        assert_eq!(m.ty(last.args[2]).shape, [16]);
    }

    /// Halves of keys over rows (a vmapped split) join after the keys' axis.
    #[test]
    fn halves_of_keys_over_rows_join_by_row() {
        let mut b = Builder::new();
        let (k0, k1) = (b.fresh(u32t(&[5])), b.fresh(u32t(&[5])));
        let (x, w) = (b.fresh(u32t(&[5])), b.fresh(u32t(&[5, 2, 3])));
        let (y0, y1) = hash(&mut b, k0, k1, x, x);
        let (z0, z1) = hash(&mut b, k0, k1, w, w);
        let f = b.finish("rows", vec![k0, k1, x, w], vec![y0, y1, z0, z1]);
        let m = merged(&f, &inputs(&f));
        assert_eq!(hashes(&m.graph), (1, 0));
        let joined = m.graph.eqns.iter().find(|e| matches!(e.op, Op::Prim(Prim::Threefry(_)))).unwrap();
        assert_eq!((m.ty(joined.args[0]).shape.clone(), m.ty(joined.args[2]).shape.clone()), (vec![5], vec![5, 7]));
    }

    /// A loop body's hashes join each other, not those outside the loop.
    #[test]
    fn loop_bodies_join_on_their_own() {
        let mut b = Builder::new();
        let (k0, k1, x) = (b.fresh(u32t(&[])), b.fresh(u32t(&[])), b.fresh(u32t(&[3])));
        let (y0, _) = hash(&mut b, k0, k1, x, x);
        b.begin_loop();
        let (i, acc) = (b.fresh(ArrayTy::scalar(DType::I32)), b.fresh(u32t(&[3])));
        let (a0, a1) = hash(&mut b, k0, k1, acc, x);
        let (c0, _) = hash(&mut b, k1, k0, x, acc);
        let next = xor(&mut b, a0, a1);
        let next = xor(&mut b, next, c0);
        let outs = b.end_loop(0, 3, &[y0], vec![i, acc], vec![next]);
        let (z0, _) = hash(&mut b, k1, k1, x, x);
        let f = b.finish("looped", vec![k0, k1, x], vec![outs[0], z0]);
        assert_eq!(hashes(&f.graph), (2, 2));
        let m = merged(&f, &inputs(&f));
        assert_eq!(hashes(&m.graph), (1, 1));
    }
}
