//! The fusion rules (to be written): for now the unfused plan.
use super::Plan;
use crate::graph::Graph;

pub(super) fn plan(g: &Graph) -> Plan {
    Plan::unfused(g)
}
