//! What both infergate processes report about themselves: process and host metrics read from `/proc`,
//! `infergate_build_info`, and the log format (`json` or `text`, colours only on a terminal).

mod host;
mod logging;
mod process;

pub use host::HostCpu;
pub use logging::{LogFormat, init_logging};
pub use process::render_process_metrics;

use std::fmt::Write;

/// Appends `infergate_build_info{process, version} 1` (a gauge that is always 1, so dashboards can join
/// on the version label) in Prometheus text format.
pub fn render_build_info(out: &mut String, process: &str, version: &str) {
    let _ = writeln!(
        out,
        "# HELP infergate_build_info The running build: always 1, labelled with process and version.\n\
         # TYPE infergate_build_info gauge\n\
         infergate_build_info{{process=\"{process}\",version=\"{version}\"}} 1"
    );
}
