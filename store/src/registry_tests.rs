//! The core's breakpoint registry over the real store: adds, changes and
//! hits made durable in the order they are published, and hits a full disk
//! refuses kept until it takes them.

use std::{collections::HashMap, sync::Arc};

use stepd_core::{
    breakpoints::{Breakpoints, Known, Verdict, verdict},
    events::EventBus,
    time::now_us,
};
use stepd_proto::v1::{
    Breakpoint, BreakpointChange, BreakpointSpec, ProbeMatch, breakpoint_spec::Location,
    event::Payload,
};

use crate::{Store, Within};

/// Breakpoints over a fresh store in a directory of their own, removed
/// when the test is done with it.
async fn breakpoints(tag: &str) -> (Breakpoints, std::path::PathBuf) {
    let (bps, _, dir) = breakpoints_and_store(tag).await;
    (bps, dir)
}

/// The same, with the store they are kept in.
async fn breakpoints_and_store(tag: &str) -> (Breakpoints, Store, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("stepd-bp-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let store = Store::open(&dir).await.unwrap();
    let bus = Arc::new(EventBus::new("test".into(), 1, 64, 64));
    let bps = Breakpoints::load(Arc::new(store.clone()), bus)
        .await
        .unwrap();
    (bps, store, dir)
}

fn probe(selector: &str) -> BreakpointSpec {
    BreakpointSpec {
        location: Some(Location::Probe(ProbeMatch::default())),
        label_selector: selector.into(),
        ..Default::default()
    }
}

fn labels(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test]
async fn listing_filters_and_applying_match_labels() {
    let (bps, dir) = breakpoints("labels").await;
    let all = bps
        .add(Some(probe("")), "test", Within::internal())
        .await
        .unwrap()
        .id;
    let sub = bps
        .add(Some(probe("agent=sub")), "test", Within::internal())
        .await
        .unwrap()
        .id;
    let bare = bps
        .add(Some(probe("!agent")), "test", Within::internal())
        .await
        .unwrap()
        .id;
    let ids = |list: Vec<Breakpoint>| list.into_iter().map(|b| b.id).collect::<Vec<_>>();
    // ListBreakpoints: no labels means no filter.
    let none = labels(&[]);
    assert_eq!(
        ids(bps.list(&none).await.unwrap()),
        [all.clone(), sub.clone(), bare.clone()]
    );
    let agent = labels(&[("agent", "sub")]);
    assert_eq!(
        ids(bps.list(&agent).await.unwrap()),
        [all.clone(), sub.clone()]
    );
    // A session or probe without labels is matched like any label set.
    assert_eq!(ids(bps.applying_to(&none).await), [all.clone(), bare]);
    assert_eq!(ids(bps.applying_to(&agent).await), [all, sub]);
    drop(bps);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn changes_made_together_are_published_in_the_stores_order() {
    let (bps, store, dir) = breakpoints_and_store("order").await;
    let bps = Arc::new(bps);
    let first = bps
        .add(Some(probe("")), "test", Within::internal())
        .await
        .unwrap()
        .id;
    let (_, mut live) = bps
        .bus()
        .subscribe(&stepd_core::events::Filter::default(), None, "");
    let changes: Vec<_> = (0..60)
        .map(|i| {
            let (bps, first) = (bps.clone(), first.clone());
            tokio::spawn(async move {
                if i % 10 == 5 {
                    let spec = BreakpointSpec {
                        condition: format!("value == {i}"),
                        ..probe("")
                    };
                    bps.update(&first, Some(spec), None, "test", Within::internal())
                        .await
                        .unwrap();
                } else {
                    bps.add(Some(probe("")), "test", Within::internal())
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for change in changes {
        change.await.unwrap();
    }
    let mut added = Vec::new();
    for _ in 0..60 {
        let event = live.recv().await.unwrap();
        let Some(Payload::BreakpointUpdated(u)) = &event.payload else {
            panic!("{event:?}")
        };
        if u.change == BreakpointChange::Added as i32 {
            let id = u.breakpoint.as_ref().unwrap().id.clone();
            added.push(id.trim_start_matches("bp-").parse::<i64>().unwrap());
        }
    }
    assert_eq!(added.len(), 54);
    assert!(
        added.windows(2).all(|w| w[0] < w[1]),
        "adds are published in the order the store gave their ids: {added:?}"
    );
    let stored = store.list_breakpoints().await.unwrap();
    assert_eq!(stored.len(), 55);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn hits_are_counted_at_once_and_published_in_batches() {
    let (bps, dir) = breakpoints("hits").await;
    let mut spec = probe("");
    spec.max_hits = 7;
    let id = bps
        .add(Some(spec), "test", Within::internal())
        .await
        .unwrap()
        .id;
    let none = labels(&[]);
    let known = Known {
        labels: &none,
        condition_holds: true,
        adapter_logs: false,
    };
    for n in 1..=5u64 {
        let decided = bps
            .hit_with(&id, |bp| {
                assert_eq!(bp.unwrap().hit_count, n, "each hit sees the ones before");
                verdict::verdict(bp, now_us(), &known)
            })
            .await;
        assert!(decided.stops());
    }
    let in_view = |bps: &Breakpoints| bps.bus().with_view(|v| v.breakpoint(&id)).unwrap();
    assert_eq!(in_view(&bps).hit_count, 0, "no event per hit");
    assert_eq!(bps.list(&none).await.unwrap()[0].hit_count, 5);
    bps.flush_hits().await;
    assert_eq!(in_view(&bps).hit_count, 5, "one batch");
    // The hit that spends max_hits is published at once.
    for _ in 0..2 {
        bps.hit_with(&id, |bp| verdict::verdict(bp, now_us(), &known))
            .await;
    }
    let spent = in_view(&bps);
    assert!(spent.spent);
    assert_eq!(spent.hit_count, 7);
    let over = bps
        .hit_with(&id, |bp| verdict::verdict(bp, now_us(), &known))
        .await;
    assert_eq!(over, Verdict::MaxHitsSpent);
    assert_eq!(
        bps.list(&none).await.unwrap()[0].hit_count,
        7,
        "not counted"
    );
    drop(bps);
    let _ = std::fs::remove_dir_all(dir);
}

/// A tmpfs on a fresh directory, unmounted when dropped. Mounting needs
/// root (CAP_SYS_ADMIN), as the test command has in CI; without it the
/// test fails saying so rather than pass having checked nothing.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("stepd-full-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=2m", "tmpfs"])
            .arg(&dir)
            .output()
            .expect("run mount");
        if !out.status.success() {
            let _ = std::fs::remove_dir(&dir);
            panic!(
                "a small tmpfs is needed (run as root): mount -t tmpfs refused ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Self(dir)
    }

    /// Fills it up; the file is removed to free the space.
    fn fill(&self) -> std::path::PathBuf {
        use std::io::Write as _;
        let path = self.0.join("filler");
        let mut file = std::fs::File::create(&path).unwrap();
        for chunk in [1 << 16, 4096, 1] {
            let block = vec![0u8; chunk];
            while file.write_all(&block).is_ok() {}
        }
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test]
async fn hits_the_store_refuses_are_kept_and_written_later() {
    let tmpfs = Tmpfs::mount("hits");
    let dir = tmpfs.0.join("data");
    let store = Store::open(&dir).await.unwrap();
    let bus = Arc::new(EventBus::new("test".into(), 1, 64, 64));
    let bps = Breakpoints::load(Arc::new(store.clone()), bus)
        .await
        .unwrap();
    let id = bps
        .add(Some(probe("")), "test", Within::internal())
        .await
        .unwrap()
        .id;
    let none = labels(&[]);
    let known = Known {
        labels: &none,
        condition_holds: true,
        adapter_logs: false,
    };
    let filler = tmpfs.fill();
    for _ in 0..3 {
        bps.hit_with(&id, |bp| verdict::verdict(bp, now_us(), &known))
            .await;
    }
    assert!(!bps.write_hits().await, "the full disk refuses them");
    assert_eq!(bps.unwritten_hits(), 3, "kept, not dropped");
    bps.hit_with(&id, |bp| verdict::verdict(bp, now_us(), &known))
        .await;
    assert!(!bps.write_hits().await);
    assert_eq!(bps.unwritten_hits(), 4, "and added to");
    let stored = store.list_breakpoints().await.unwrap();
    assert_eq!(stored[0].hit_count, 0);

    std::fs::remove_file(filler).unwrap();
    assert!(bps.write_hits().await);
    assert_eq!(bps.unwritten_hits(), 0);
    drop(bps);
    store.close().await;
    let reopened = Store::open(&dir).await.unwrap();
    assert_eq!(reopened.list_breakpoints().await.unwrap()[0].hit_count, 4);
    reopened.close().await;
    drop(tmpfs);
}
