//! The MLP the pit-infer and train-validate probes run: sim/burn/nn.py's `Mlp`,
//! Linear(d, h) -> Relu -> Linear(h, d), both with bias, weights lazily initialised
//! (burn-nn's `LinearConfig::init`). Its field names are the module paths burn-optim
//! joins for the parameters (`hidden.weight` ...).

use burn::module::Module;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::prelude::*;

#[derive(Module, Debug)]
pub struct Mlp {
    pub hidden: Linear,
    pub activation: Relu,
    pub output: Linear,
}

impl Mlp {
    pub fn new(d_in: usize, hidden: usize, d_out: usize, device: &Device) -> Self {
        Self {
            hidden: LinearConfig::new(d_in, hidden).init(device),
            activation: Relu::new(),
            output: LinearConfig::new(hidden, d_out).init(device),
        }
    }

    pub fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        self.output.forward(self.activation.forward(self.hidden.forward(x)))
    }
}
