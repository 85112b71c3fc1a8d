//! Replicas sharing one PostgreSQL database act as one daemon: each runs
//! its own sessions and records them in the session directory under a
//! lease it renews (`lease.rs`), relays every peer's session events into
//! its own event bus (`relay.rs`), so its streams, lists and snapshots
//! cover the cluster, and forwards a call about a peer's session to that
//! peer (`forward.rs`). Nothing here runs on SQLite: one daemon is its own
//! cluster.

mod forward;
mod lease;
mod owners;
mod peers;
mod relay;

use std::{
    sync::{
        Arc, OnceLock,
        atomic::{AtomicBool, AtomicI64, Ordering},
    },
    time::Duration,
};

pub use forward::ForwardLayer;
use owners::Owners;
use peers::Peers;
use tokio_util::sync::CancellationToken;

use stepd_core::events::EventBus;
use stepd_store::Store;

/// How a replica finds and trusts its peers (`--advertise-address`,
/// `--replica-lease`, `--peer-token-file`).
#[derive(Debug, Clone, Default)]
pub struct ReplicaConfig {
    /// Where peers reach this replica; the listen address when unset.
    pub advertise_address: Option<String>,
    /// How long this replica's sessions stay its own after a renewal.
    pub lease: Duration,
    /// The bearer token presented to peers; none for peers that trust
    /// this replica by its Unix user (one machine), by its certificate, or
    /// run `--insecure`.
    pub peer_token: Option<String>,
    /// How peers are reached when they serve TLS (as this replica does).
    pub tls: Option<PeerTls>,
}

/// TLS to peers (`--peer-tls-ca`, `--peer-tls-cert`, `--peer-tls-key`).
#[derive(Debug, Clone)]
pub struct PeerTls {
    /// PEM CAs the peers' server certificates are checked against.
    pub ca: Vec<u8>,
    /// PEM certificate and key presented to peers (mutual TLS).
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

/// Set on a peer's Subscribe: relay only the sessions this replica runs.
pub const RELAY: &str = "x-stepd-relay";

/// This replica's part in the cluster.
pub struct Cluster {
    /// This replica's id (the daemon's instance id).
    id: String,
    /// Where peers reach it: known once the daemon serves ([`Cluster::join`]).
    address: OnceLock<String>,
    advertise: Option<String>,
    started_us: i64,
    lease: Duration,
    store: Store,
    bus: Arc<EventBus>,
    owners: Owners,
    peers: Peers,
    /// The live peers, by their id without dashes (as inspector ids name
    /// them).
    live: std::sync::Mutex<std::collections::HashMap<String, Peer>>,
    /// Until when this replica's lease holds, as last renewed (µs).
    lease_until_us: AtomicI64,
    /// What the directory says of this replica's sessions may be wrong (a
    /// write of it failed): it is written whole at the next renewal.
    unsure: AtomicBool,
    /// Cancelled when this replica leaves the directory: it stops renewing
    /// and following its peers.
    stop: CancellationToken,
    /// Cancelled once this replica's own sessions ended at shutdown: the
    /// peers' relays have had their ends and may go.
    relays_end: CancellationToken,
}

/// A session or pause another replica runs, and where.
#[derive(Debug, Clone)]
pub struct Peer {
    /// The replica's id.
    pub id: String,
    /// Where it is reached.
    pub address: String,
}

impl Cluster {
    /// This replica's part, on PostgreSQL (`None` on SQLite). It relays
    /// and forwards nothing until it [joins](Cluster::join).
    pub fn new(store: &Store, bus: &Arc<EventBus>, config: &ReplicaConfig) -> Option<Arc<Self>> {
        (store.backend() == "postgres").then(|| {
            Arc::new(Self {
                id: bus.instance_id().to_owned(),
                address: OnceLock::new(),
                advertise: config.advertise_address.clone(),
                started_us: stepd_core::time::now_us(),
                lease: config.lease,
                store: store.clone(),
                bus: bus.clone(),
                owners: Owners::default(),
                peers: Peers::new(config.peer_token.clone(), config.tls.clone()),
                live: Default::default(),
                lease_until_us: AtomicI64::new(0),
                unsure: AtomicBool::new(false),
                // Not the daemon's shutdown: a draining replica keeps its
                // lease and its place in the directory until it retires, so
                // its peers never take it for lost.
                stop: CancellationToken::new(),
                relays_end: CancellationToken::new(),
            })
        })
    }

    /// Registers this replica in the directory, reachable at
    /// `--advertise-address` or else at `listen` (the address it serves
    /// on), and starts renewing its lease and following its peers.
    pub async fn join(self: &Arc<Self>, listen: &str) -> anyhow::Result<()> {
        let address = self.advertise.clone().unwrap_or_else(|| listen.to_owned());
        let _ = self.address.set(address);
        self.renew().await?;
        tokio::spawn(lease::keep(self.clone()));
        tokio::spawn(lease::record_own_sessions(self.clone()));
        Ok(())
    }

    /// This replica's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The replica that runs `session_id`, when it is not this one.
    pub fn owner_of_session(&self, session_id: &str) -> Option<Peer> {
        self.owners.of_session(session_id)
    }

    /// The replica whose session holds the pause `key`, when it is not
    /// this one.
    pub fn owner_of_pause(&self, key: &str) -> Option<Peer> {
        self.owners.of_pause(key)
    }

    /// The replica that holds the inspector `inspector_id`, when it is not
    /// this one.
    pub fn owner_of_inspector(&self, inspector_id: &str) -> Option<Peer> {
        let holder = stepd_core::inspector::holder_of(inspector_id)?;
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(holder)
            .cloned()
    }

    /// The replicas in the directory, each with the live sessions it runs.
    pub async fn replicas(
        &self,
    ) -> stepd_core::error::ApiResult<Vec<stepd_proto::v1::ReplicaStatus>> {
        let (replicas, owned) = (
            self.store
                .replicas()
                .await
                .map_err(stepd_store::unavailable)?,
            self.store
                .owned_sessions()
                .await
                .map_err(stepd_store::unavailable)?,
        );
        Ok(replicas
            .into_iter()
            .filter(|r| r.lease_until_us != stepd_store::RETIRED)
            .map(|r| stepd_proto::v1::ReplicaStatus {
                sessions: u32::try_from(owned.iter().filter(|o| o.replica_id == r.id).count())
                    .unwrap_or(u32::MAX),
                answering: r.id == self.id,
                lease_until: Some(stepd_core::time::timestamp_from_us(r.lease_until_us)),
                id: r.id,
                address: r.address,
            })
            .collect())
    }

    /// Whether this replica runs `session_id` itself (what a peer's relay
    /// may take from it).
    pub fn runs(&self, session_id: &str) -> bool {
        !self.owners.is_relayed(session_id)
    }

    /// What ends a peer's relay of this replica's sessions: not the start
    /// of a shutdown, but the end of its sessions ([`Cluster::sessions_ended`]),
    /// so that the peers see each session end as this replica ended it.
    pub fn relays_end(&self) -> CancellationToken {
        self.relays_end.clone()
    }

    /// This replica's own sessions have ended (shutdown): its peers'
    /// relays end once they have sent what is left.
    pub fn sessions_ended(&self) {
        self.relays_end.cancel();
    }

    /// Whether this replica runs a session, as an event filter takes it:
    /// what its history records and what its peers may relay from it.
    pub fn own(self: &Arc<Self>) -> stepd_core::events::Own {
        let cluster = Arc::downgrade(self);
        stepd_core::events::Own(Arc::new(move |session_id| {
            cluster.upgrade().is_none_or(|c| c.runs(session_id))
        }))
    }

    /// Takes this replica's sessions out of the directory and marks it
    /// retired (shutdown): its peers need not wait for its lease.
    pub async fn retire(&self) {
        self.stop.cancel();
        self.relays_end.cancel();
        if self.address.get().is_none() {
            return;
        }
        if let Err(err) = self.store.retire_replica(&self.id).await {
            tracing::warn!(error = %err, "could not take this replica out of the directory");
        }
    }

    /// Renews this replica's lease; whether it had run out first (the
    /// database was away, or this replica did not run), when peers may
    /// have taken its sessions out of the directory.
    async fn renew(&self) -> anyhow::Result<bool> {
        let lease_us = i64::try_from(self.lease.as_micros()).unwrap_or(i64::MAX);
        let now = stepd_core::time::now_us();
        let until = now.saturating_add(lease_us);
        self.store
            .renew_replica(&stepd_store::Replica {
                id: self.id.clone(),
                address: self.address.get().cloned().unwrap_or_default(),
                started_us: self.started_us,
                lease_until_us: until,
            })
            .await?;
        let was = self.lease_until_us.swap(until, Ordering::Relaxed);
        Ok(was != 0 && was < now)
    }
}
