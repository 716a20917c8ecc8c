//! The plugin watcher (`pkg/kubelet/pluginmanager/pluginwatcher/plugin_watcher.go`): inotify on the registration
//! folder and every folder below it, turned into "socket appeared" and "socket went" changes.
//!
//! [`start`] makes the folder, watches it (recursively), then walks what is already there, so a socket that exists
//! before rkubelet starts is found as one made later. As upstream: a created path whose name starts with `.` is
//! ignored; a created socket is announced; a created folder is walked for the sockets already in it; a removed
//! path is announced as gone (whatever it was: the manager ignores paths it does not know); a path moved into the
//! folder counts as created, one moved out is not seen. The changes go to the manager's task over a channel; the
//! watch ends when the returned [`Watch`] is dropped.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc::UnboundedSender;
use tracing::{debug, warn};

/// A change of the registration folder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A plugin socket appeared.
    Added(PathBuf),
    /// A path went.
    Removed(PathBuf),
}

/// Why the watch cannot start.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The folder cannot be made.
    #[error("error (re-)creating root {}: {source}", path.display())]
    Folder {
        /// The folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// inotify refused.
    #[error("failed to start plugin fsWatcher for {}, err: {source}", path.display())]
    Watch {
        /// The folder.
        path: PathBuf,
        /// Why.
        source: notify::Error,
    },
}

/// A running watch; dropping it stops it.
pub struct Watch {
    _watcher: notify::RecommendedWatcher,
}

/// Watches `dir` (made if missing), sending each change to `tx`; the sockets already there come first.
pub fn start(dir: &Path, tx: UnboundedSender<Change>) -> Result<Watch, WatchError> {
    std::fs::create_dir_all(dir).map_err(|source| WatchError::Folder { path: dir.to_path_buf(), source })?;
    let events = tx.clone();
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| match res {
        Ok(event) => handle(&event, &events),
        Err(e) => warn!(error = %e, "FsWatcher received error"),
    })
    .map_err(|source| WatchError::Watch { path: dir.to_path_buf(), source })?;
    watcher
        .watch(dir, RecursiveMode::Recursive)
        .map_err(|source| WatchError::Watch { path: dir.to_path_buf(), source })?;
    traverse(dir, &tx);
    Ok(Watch { _watcher: watcher })
}

fn handle(event: &notify::Event, tx: &UnboundedSender<Change>) {
    use notify::event::{ModifyKind, RenameMode};
    match event.kind {
        EventKind::Create(_) | EventKind::Modify(ModifyKind::Name(RenameMode::To)) => {
            for p in &event.paths {
                created(p, tx);
            }
        }
        // A rename seen whole: its second path is where it went.
        EventKind::Modify(ModifyKind::Name(RenameMode::Both)) => {
            if let Some(p) = event.paths.get(1) {
                created(p, tx);
            }
        }
        EventKind::Remove(_) => {
            for p in &event.paths {
                debug!(path = %p.display(), "Removing socket path from desired state cache");
                let _ = tx.send(Change::Removed(p.clone()));
            }
        }
        _ => {}
    }
}

/// A path was created (`handleCreateEvent`).
fn created(path: &Path, tx: &UnboundedSender<Change>) {
    if path.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')) {
        debug!(path = %path.display(), "Ignoring file (starts with '.')");
        return;
    }
    match std::fs::metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            debug!(path = %path.display(), "Adding socket path or updating timestamp to desired state cache");
            let _ = tx.send(Change::Added(path.to_path_buf()));
        }
        Ok(m) if m.is_dir() => traverse(path, tx),
        Ok(_) => debug!(path = %path.display(), "Ignoring non socket file"),
        // Gone again already: its removal follows.
        Err(e) => debug!(path = %path.display(), error = %e, "stat of a created path failed"),
    }
}

/// Announces the sockets below `dir` (`traversePluginDir`); folders are walked, other files ignored.
fn traverse(dir: &Path, tx: &UnboundedSender<Change>) {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = match std::fs::read_dir(&d) {
            Ok(e) => e,
            Err(e) => {
                warn!(path = %d.display(), error = %e, "Error accessing path");
                continue;
            }
        };
        let mut children: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        children.sort();
        for p in children.into_iter().rev() {
            match std::fs::metadata(&p) {
                Ok(m) if m.is_dir() => stack.push(p),
                Ok(m) if m.file_type().is_socket() => created(&p, tx),
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixListener;
    use std::time::Duration;

    use super::*;

    async fn next(rx: &mut tokio::sync::mpsc::UnboundedReceiver<Change>) -> Change {
        tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.expect("a change within 10 s").unwrap()
    }

    #[tokio::test]
    async fn sockets_there_before_and_made_after_are_announced_and_their_removal_too() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("plugins_registry");
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        let _before = UnixListener::bind(dir.join("sub/before.sock")).unwrap();
        std::fs::write(dir.join("not-a-socket"), "x").unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let _w = start(&dir, tx).unwrap();
        assert_eq!(next(&mut rx).await, Change::Added(dir.join("sub/before.sock")));

        let _hidden = UnixListener::bind(dir.join(".hidden.sock")).unwrap();
        let _after = UnixListener::bind(dir.join("after.sock")).unwrap();
        assert_eq!(next(&mut rx).await, Change::Added(dir.join("after.sock")), "a hidden socket is ignored");

        // A folder made later with a socket in it: found by the walk of the new folder or by its own event.
        std::fs::create_dir(dir.join("driver")).unwrap();
        let _nested = UnixListener::bind(dir.join("driver/plugin.sock")).unwrap();
        assert_eq!(next(&mut rx).await, Change::Added(dir.join("driver/plugin.sock")));

        std::fs::remove_file(dir.join("after.sock")).unwrap();
        loop {
            match next(&mut rx).await {
                Change::Removed(p) if p == dir.join("after.sock") => break,
                // The nested socket may be announced twice (walk and event).
                Change::Added(p) if p == dir.join("driver/plugin.sock") => continue,
                other => panic!("unexpected {other:?}"),
            }
        }
    }
}
