//! What an env's action is, as the checker declares it (`discrete(n)`, `box(n, lo, hi)`)
//! and the host envs report it. Its own module, below both, so that the host layer needs
//! nothing of the elaborator.

use crate::array::{ArrayTy, DType};

/// What one action of an env is.
#[derive(Clone, Debug, PartialEq)]
pub enum ActionSpace {
    /// `discrete(n)`: an `i32` in `0..n`.
    Discrete(u64),
    /// `box(n)` or `box(n, lo, hi)`: an `f32[n]`, with bounds per component when declared.
    /// The env enforces them (Gymnasium's Pendulum clips); nothing else clips or checks.
    Box { n: u64, bounds: Option<(Vec<f32>, Vec<f32>)> },
}

impl ActionSpace {
    /// One action's array type: `i32` or `f32[n]` (`ty` in the checker's types).
    pub fn array_ty(&self) -> ArrayTy {
        match self {
            ActionSpace::Discrete(_) => ArrayTy::scalar(DType::I32),
            ActionSpace::Box { n, .. } => ArrayTy::new(DType::F32, vec![*n as usize]),
        }
    }
}

/// `discrete(3)`, `box(2)`, `box(1, -2.0, 2.0)`, `box(2, [-1.0, 0.0], 1.0)`: as written in `.pod`.
impl std::fmt::Display for ActionSpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bound = |b: &[f32]| match b {
            [first, rest @ ..] if rest.iter().all(|x| x.to_bits() == first.to_bits()) => format!("{first:?}"),
            _ => format!("[{}]", b.iter().map(|x| format!("{x:?}")).collect::<Vec<_>>().join(", ")),
        };
        match self {
            ActionSpace::Discrete(n) => write!(f, "discrete({n})"),
            ActionSpace::Box { n, bounds: None } => write!(f, "box({n})"),
            ActionSpace::Box { n, bounds: Some((lo, hi)) } => write!(f, "box({n}, {}, {})", bound(lo), bound(hi)),
        }
    }
}
