//! Progress bars of the long commands (`check`, `fuzz`, `bench`, `run`), on stderr.
//!
//! A bar is drawn only when stderr is a terminal: redirected to a file or a pipe (logs, CI, tests) it draws
//! nothing, so the captured output holds the command's own lines only. It never writes to stdout, where the
//! tables go; lines a command prints while a bar is shown go through [`Progress::println`] and
//! [`Progress::eprintln`], which lift the bar for the line. Dropping a bar clears it, also on an early `?` return,
//! so an error message never lands after a half-drawn bar.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

/// A progress bar on stderr (hidden when stderr is not a terminal); cleared when dropped.
pub struct Progress(ProgressBar);

impl Progress {
    /// A bar of `len` steps, `prefix` in front (e.g. the operator), drawn when stderr is a terminal.
    pub fn new(len: u64, prefix: impl Into<String>) -> Self {
        Self::with_target(len, prefix, std::io::stderr().is_terminal())
    }

    /// A bar drawn on stderr when `visible`, else hidden.
    pub fn with_target(len: u64, prefix: impl Into<String>, visible: bool) -> Self {
        let target = if visible { ProgressDrawTarget::stderr() } else { ProgressDrawTarget::hidden() };
        let bar = ProgressBar::with_draw_target(Some(len), target);
        bar.set_style(
            ProgressStyle::with_template("{prefix:.bold} [{bar:30}] {pos}/{len} {elapsed} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.set_prefix(prefix.into());
        Progress(bar)
    }

    /// A line on stdout, with the bar lifted while it is written.
    pub fn println(&self, line: &str) {
        self.0.suspend(|| println!("{line}"));
    }

    /// A line on stderr, with the bar lifted while it is written.
    pub fn eprintln(&self, line: &str) {
        self.0.suspend(|| eprintln!("{line}"));
    }
}

impl std::ops::Deref for Progress {
    type Target = ProgressBar;

    fn deref(&self) -> &ProgressBar {
        &self.0
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::Progress;

    #[test]
    fn a_bar_is_hidden_unless_asked_to_draw() {
        let hidden = Progress::with_target(10, "op", false);
        assert!(hidden.is_hidden());
        hidden.inc(3);
        assert_eq!(hidden.position(), 3, "a hidden bar still counts");
        // Under `cargo test` stderr is captured or a terminal: `new` follows it.
        use std::io::IsTerminal;
        assert_eq!(Progress::new(1, "op").is_hidden(), !std::io::stderr().is_terminal());
    }
}
