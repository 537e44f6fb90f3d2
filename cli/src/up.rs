//! `outpost up`: everything on one machine, on the embedded store.

use std::path::PathBuf;

use anyhow::Context as _;
use outpost_apiserver::storage::{EmbeddedOptions, EmbeddedStore, Store as _};

/// Arguments of `outpost up`.
#[derive(clap::Args)]
pub struct UpArgs {
    /// Where Outpost keeps its state; a second run resumes from it.
    #[arg(long, default_value = ".outpost", env = "OUTPOST_DATA_DIR")]
    data_dir: PathBuf,
}

/// Opens the embedded store, reports it ready, and runs until Ctrl-C.
///
/// The API server, controllers and a local runner join here as they are built.
pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    let dir = args.data_dir.join("store");
    let store = EmbeddedStore::open(&dir, EmbeddedOptions::default())
        .await
        .with_context(|| format!("cannot open the embedded store in {}", dir.display()))?;
    let revision = store.current_revision().await?;
    println!(
        "outpost: embedded store ready at {} (revision {revision})",
        store.path().display()
    );
    println!("outpost: press Ctrl-C to stop");
    tokio::signal::ctrl_c()
        .await
        .context("cannot wait for Ctrl-C")?;
    store.close().await?;
    println!("outpost: stopped");
    Ok(())
}
