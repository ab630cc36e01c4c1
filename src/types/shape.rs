//! Shape rules of the surface language, over symbolic dimensions. The checker uses them
//! with size parameters, the IR builder with known sizes: one rule serves both.

use super::Dim;

/// NumPy broadcasting: align trailing dimensions; each pair must be equal or contain a 1.
pub fn broadcast(a: &[Dim], b: &[Dim]) -> Option<Vec<Dim>> {
    let n = a.len().max(b.len());
    let one = Dim::Known(1);
    (0..n)
        .map(|i| {
            let x = if i + a.len() >= n { &a[i + a.len() - n] } else { &one };
            let y = if i + b.len() >= n { &b[i + b.len() - n] } else { &one };
            if x == y || *y == one {
                Some(x.clone())
            } else if *x == one {
                Some(y.clone())
            } else {
                None
            }
        })
        .collect()
}

/// How `@` contracts its operands: which axis of each, and the batch axes they share.
#[derive(Clone, Debug, PartialEq)]
pub struct MatMul {
    pub batch: Vec<usize>,
    pub lhs_contract: usize,
    pub rhs_contract: usize,
    pub out: Vec<Dim>,
}

/// `@` as in NumPy's `matmul`: vector·vector, matrix·vector, vector·matrix, matrix·matrix,
/// and stacks of matrices with equal leading (batch) dimensions.
/// The error names the two contracted dimensions, or says the ranks do not fit.
pub fn matmul(a: &[Dim], b: &[Dim]) -> Result<MatMul, MatMulError> {
    let (ra, rb) = (a.len(), b.len());
    if ra == 0 || rb == 0 || (ra > 2 && rb != ra) || (rb > 2 && ra != rb) {
        return Err(MatMulError::Rank);
    }
    let lhs_contract = ra - 1;
    let rhs_contract = if rb == 1 { 0 } else { rb - 2 };
    if a[lhs_contract] != b[rhs_contract] {
        return Err(MatMulError::Contract(a[lhs_contract].clone(), b[rhs_contract].clone()));
    }
    let nbatch = ra.saturating_sub(2);
    if a[..nbatch] != b[..nbatch] {
        return Err(MatMulError::Rank);
    }
    let mut out: Vec<Dim> = a[..nbatch].to_vec();
    if ra >= 2 {
        out.push(a[ra - 2].clone());
    }
    if rb >= 2 {
        out.push(b[rb - 1].clone());
    }
    Ok(MatMul { batch: (0..nbatch).collect(), lhs_contract, rhs_contract, out })
}

#[derive(Clone, Debug, PartialEq)]
pub enum MatMulError {
    Rank,
    Contract(Dim, Dim),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(xs: &[u64]) -> Vec<Dim> {
        xs.iter().map(|&x| Dim::Known(x)).collect()
    }

    #[test]
    fn broadcasting_follows_numpy() {
        assert_eq!(broadcast(&k(&[16, 8]), &k(&[8])), Some(k(&[16, 8])));
        assert_eq!(broadcast(&k(&[]), &k(&[3, 2])), Some(k(&[3, 2])));
        assert_eq!(broadcast(&k(&[3, 1]), &k(&[1, 4])), Some(k(&[3, 4])));
        assert_eq!(broadcast(&k(&[3]), &k(&[4])), None);
        let n = Dim::Param("N".into());
        assert_eq!(broadcast(std::slice::from_ref(&n), &k(&[1])), Some(vec![n.clone()]));
        assert_eq!(broadcast(&[n], &k(&[3])), None);
    }

    #[test]
    fn matmul_shapes() {
        assert_eq!(matmul(&k(&[2, 3]), &k(&[3, 2])).map(|m| m.out), Ok(k(&[2, 2])));
        assert_eq!(matmul(&k(&[3]), &k(&[3, 2])).map(|m| m.out), Ok(k(&[2])));
        assert_eq!(matmul(&k(&[2, 3]), &k(&[3])).map(|m| m.out), Ok(k(&[2])));
        assert_eq!(matmul(&k(&[3]), &k(&[3])).map(|m| m.out), Ok(k(&[])));
        assert_eq!(matmul(&k(&[5, 2, 3]), &k(&[5, 3, 4])).map(|m| m.out), Ok(k(&[5, 2, 4])));
        assert_eq!(matmul(&k(&[2, 3]), &k(&[2, 2])), Err(MatMulError::Contract(Dim::Known(3), Dim::Known(2))));
        assert_eq!(matmul(&k(&[]), &k(&[2])), Err(MatMulError::Rank));
    }
}
