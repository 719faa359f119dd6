//! The `k3k` command line. `k3k --help` lists the commands; each has its own `--help`.

mod cli;

use clap::Parser;

/// Whether an error comes from writing to a reader that went away (`k3k emit ... | head -1`).
fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}

fn main() {
    // `print!` panics when stdout's reader has gone: that ends the command quietly, like any Unix filter.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let p = info.payload();
        let msg = p.downcast_ref::<String>().map(String::as_str).or_else(|| p.downcast_ref::<&str>().copied());
        if msg.is_some_and(|m| m.contains("failed printing to stdout") && m.contains("Broken pipe")) {
            std::process::exit(0);
        }
        default_hook(info)
    }));
    let args = cli::Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("K3K_LOG").unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    match cli::dispatch(args) {
        Ok(code) => std::process::exit(code),
        Err(e) if broken_pipe(&e) => std::process::exit(0),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::exit(2);
        }
    }
}
