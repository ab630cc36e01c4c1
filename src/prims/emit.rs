//! The text builder that lowering rules write StableHLO into, and the spelling of types
//! and constants in MLIR's generic form (see `lower::stablehlo` for the module around).

use crate::array::{Array, ArrayTy, DType, Data};

/// The text builder that lowering rules write into: fresh SSA names, indented lines and
/// type spelling.
#[derive(Debug)]
pub struct LowerCx {
    text: String,
    depth: usize,
    next: u32,
    /// How many replicas of the program each process runs.
    replicas: usize,
    /// How many processes run it (collectives reduce over all their replicas).
    processes: usize,
    /// The last cross-process collective's token in the region being written (see
    /// `prims::collective::CROSS_PROCESS_SUM`).
    token: Option<String>,
}

impl Default for LowerCx {
    fn default() -> LowerCx {
        LowerCx::with_replicas(1)
    }
}

impl LowerCx {
    /// An empty builder at indentation zero, for a single-replica program.
    pub fn new() -> LowerCx {
        LowerCx::default()
    }

    /// An empty builder for a program that runs on `replicas` replicas.
    pub fn with_replicas(replicas: usize) -> LowerCx {
        LowerCx { text: String::new(), depth: 0, next: 0, replicas, processes: 1, token: None }
    }

    /// This builder for a program that each of `processes` processes runs.
    pub fn across_processes(self, processes: usize) -> LowerCx {
        LowerCx { processes, ..self }
    }

    /// How many replicas of the program each process runs.
    pub fn replicas(&self) -> usize {
        self.replicas
    }

    /// How many processes run the program.
    pub fn processes(&self) -> usize {
        self.processes
    }

    /// The token the next cross-process collective takes: the last one's, else the
    /// replica's index (`stablehlo.replica_id`).
    pub fn collective_token(&mut self) -> String {
        match &self.token {
            Some(t) => t.clone(),
            None => {
                let t = self.op("stablehlo.replica_id", &[], "", &[], &ArrayTy::scalar(DType::U32));
                self.token = Some(t.clone());
                t
            }
        }
    }

    /// Records the token a cross-process collective returned.
    pub fn set_collective_token(&mut self, token: String) {
        self.token = Some(token);
    }

    /// Runs `write` for a nested region: the tokens it makes do not outlive it.
    pub fn region<T>(&mut self, write: impl FnOnce(&mut LowerCx) -> T) -> T {
        let outer = self.token.clone();
        let r = write(self);
        self.token = outer;
        r
    }

    /// A fresh SSA name, `%N`.
    pub fn fresh(&mut self) -> String {
        let name = format!("%{}", self.next);
        self.next += 1;
        name
    }

    /// Appends one line at the current indentation.
    pub fn line(&mut self, text: &str) {
        for _ in 0..self.depth {
            self.text.push_str("  ");
        }
        self.text.push_str(text);
        self.text.push('\n');
    }

    /// Appends a line that opens a block (`... {`), then indents.
    pub fn open(&mut self, text: &str) {
        self.line(text);
        self.depth += 1;
    }

    /// Dedents, then appends the line that closes a block (`}` or `}) : ...`).
    pub fn close(&mut self, text: &str) {
        self.depth = self.depth.saturating_sub(1);
        self.line(text);
    }

    /// Appends a block label (`^bb0(...):`), outdented to the level of the op that owns
    /// the region, as MLIR prints it.
    pub fn label(&mut self, text: &str) {
        self.depth = self.depth.saturating_sub(1);
        self.line(text);
        self.depth += 1;
    }

    /// Closes one block and opens the next on the same line (`}, {` between regions).
    pub fn reopen(&mut self, text: &str) {
        self.close(text);
        self.depth += 1;
    }

    /// The text written so far.
    pub fn finish(self) -> String {
        self.text
    }

    /// Emits `%r = "op"(args) <{attrs}> : (arg types) -> out` and returns `%r`. `attrs`
    /// is the inside of the property dictionary, empty for none.
    pub fn op(&mut self, op: &str, args: &[String], attrs: &str, arg_tys: &[ArrayTy], out: &ArrayTy) -> String {
        let r = self.fresh();
        let props = if attrs.is_empty() { String::new() } else { format!(" <{{{attrs}}}>") };
        self.line(&format!(
            "{r} = \"{op}\"({}){props} : {}",
            args.join(", "),
            fn_type(arg_tys, std::slice::from_ref(out))
        ));
        r
    }

    /// Emits a `stablehlo.constant` holding `value` and returns its name.
    pub fn constant(&mut self, value: &Array) -> String {
        self.constant_text(&dense(value), &value.ty())
    }

    /// Emits a constant of type `ty` whose every element is the scalar `value`.
    pub fn splat(&mut self, value: &Array, ty: &ArrayTy) -> String {
        debug_assert!(value.shape.is_empty() && value.dtype() == ty.dtype);
        self.constant_text(&dense(value), ty)
    }

    fn constant_text(&mut self, dense: &str, ty: &ArrayTy) -> String {
        self.op("stablehlo.constant", &[], &format!("value = {dense} : {}", tensor_type(ty)), &[], ty)
    }

    /// Emits `"stablehlo.return"(values)`, the terminator of a region.
    pub fn ret(&mut self, values: &[String], tys: &[ArrayTy]) {
        self.line(&format!("\"stablehlo.return\"({}) : {}", values.join(", "), fn_type(tys, &[])));
    }
}

/// The MLIR spelling of an element type: `f32`, `i32`, `ui32`, `ui8`, `i1`.
pub fn element_type(d: DType) -> &'static str {
    match d {
        DType::F32 => "f32",
        DType::I32 => "i32",
        DType::U32 => "ui32",
        DType::U8 => "ui8",
        DType::Bool => "i1",
    }
}

/// The MLIR spelling of an array type: `tensor<2x3xf32>`, `tensor<i32>`.
pub fn tensor_type(ty: &ArrayTy) -> String {
    let mut s = String::from("tensor<");
    for d in &ty.shape {
        s.push_str(&format!("{d}x"));
    }
    s.push_str(element_type(ty.dtype));
    s.push('>');
    s
}

/// `^bb0(%a: tensor<..>, ...):`, the entry block of a region. Block labels are local to
/// their region, so every region can use `^bb0`.
pub fn block_header(params: &[String], tys: &[ArrayTy]) -> String {
    let ps: Vec<String> = params.iter().zip(tys).map(|(p, t)| format!("{p}: {}", tensor_type(t))).collect();
    format!("^bb0({}):", ps.join(", "))
}

/// A function type, `(tensor<f32>, tensor<f32>) -> tensor<f32>`; results are
/// parenthesised unless there is exactly one.
pub fn fn_type(args: &[ArrayTy], outs: &[ArrayTy]) -> String {
    let args: Vec<String> = args.iter().map(tensor_type).collect();
    let outs: Vec<String> = outs.iter().map(tensor_type).collect();
    let outs = if outs.len() == 1 { outs[0].clone() } else { format!("({})", outs.join(", ")) };
    format!("({}) -> {outs}", args.join(", "))
}

/// An f32 literal that MLIR parses back to the same bits: finite values in shortest
/// round-trip scientific notation (MLIR wants a `.` in a float literal, so `1e0` becomes
/// `1.0e0`), NaN and infinities as their bit pattern in hex, which MLIR reads as the
/// raw bits of the element type.
pub fn f32_literal(x: f32) -> String {
    if !x.is_finite() {
        return format!("0x{:08X}", x.to_bits());
    }
    let s = format!("{x:e}");
    match s.find('e') {
        Some(e) if !s[..e].contains('.') => format!("{}.0{}", &s[..e], &s[e..]),
        Some(_) | None => s,
    }
}

/// The `dense<...>` attribute of an array: a splat when every element is the same,
/// otherwise nested lists following the shape. A splat is found on the values (f32 by
/// their bits, as their literals tell them apart) so that a large one formats one literal.
pub fn dense(a: &Array) -> String {
    /// Whether `v` is a splat, and the literals to write: its first element's if so.
    fn literals<T>(v: &[T], same: impl Fn(&T, &T) -> bool, lit: impl Fn(&T) -> String) -> (bool, Vec<String>) {
        let splat = v.first().is_some_and(|x| v.iter().all(|y| same(x, y)));
        (splat, v[..if splat { 1 } else { v.len() }].iter().map(lit).collect())
    }
    let (splat, elems) = match &a.data {
        Data::F32(v) => literals(v, |x, y| x.to_bits() == y.to_bits(), |&x| f32_literal(x)),
        Data::I32(v) => literals(v, PartialEq::eq, ToString::to_string),
        Data::U32(v) => literals(v, PartialEq::eq, ToString::to_string),
        Data::U8(v) => literals(v, PartialEq::eq, ToString::to_string),
        Data::Bool(v) => literals(v, PartialEq::eq, ToString::to_string),
    };
    if splat {
        return format!("dense<{}>", elems[0]);
    }
    fn nest(elems: &[String], shape: &[usize]) -> String {
        match shape.split_first() {
            None => elems[0].clone(),
            Some((&n, rest)) => {
                let chunk: usize = rest.iter().product();
                let items: Vec<String> = (0..n).map(|i| nest(&elems[i * chunk..(i + 1) * chunk], rest)).collect();
                format!("[{}]", items.join(", "))
            }
        }
    }
    format!("dense<{}>", nest(&elems, &a.shape))
}
