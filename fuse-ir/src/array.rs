//! The values of the reference interpreter: dense row-major f64 arrays, which the views and model ops
//! define their meaning on.

/// A dense row-major f64 array.
#[derive(Clone, Debug, PartialEq)]
pub struct Array {
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

impl Array {
    /// Panics if `data` does not hold exactly one value per element of `shape` (a bug in the caller).
    pub fn new(shape: Vec<usize>, data: Vec<f64>) -> Array {
        assert_eq!(
            data.len(),
            shape.iter().product::<usize>(),
            "Array::new: {} values for shape {shape:?}",
            data.len()
        );
        Array { shape, data }
    }

    /// A 0-d array.
    pub fn scalar(v: f64) -> Array {
        Array { shape: vec![], data: vec![v] }
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}
