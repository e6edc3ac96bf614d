//! Optimisation passes: functions from graph to graph, applied until nothing changes.

use crate::error::Result;
use crate::ir::Graph;

/// Run every pass until the graph stops changing.
pub fn optimise(graph: Graph) -> Result<Graph> {
    Ok(graph)
}
