//! The daemon's shared state: what every API handler delegates to.

use anyhow::Context as _;
use std::{
    sync::{Arc, OnceLock},
    time::Instant,
};

use tokio_util::sync::CancellationToken;

use stepd_dap::session::{DapSettings, Launcher};
use stepd_probe::ProbeSettings;
use stepd_proto::v1::{DebugInput, SendDebugInputResponse};

use crate::{auth::Identity, config::Config};
use stepd_cluster::Cluster;
use stepd_core::{
    breakpoints::Breakpoints,
    error::ApiResult,
    events::{EventBus, SubscriberMemory},
    inspector::Inspectors,
    metrics::Counts,
    session::{Context, Sessions, pause::PauseRegistry},
    slots::{Cap, Slots},
};
use stepd_history::History;
use stepd_store::Store;

/// One running stepd.
pub struct Daemon {
    /// Resolved configuration.
    pub config: Config,
    /// Random id of this process, new on every start.
    pub instance_id: String,
    /// When the daemon started.
    pub started: Instant,
    /// Events and the state view.
    pub bus: Arc<EventBus>,
    /// Pending pauses.
    pub pauses: Arc<PauseRegistry>,
    /// Breakpoint operations.
    pub breakpoints: Arc<Breakpoints>,
    /// Debug sessions.
    pub sessions: Arc<Sessions>,
    /// What every session is given.
    pub context: Context,
    /// Starts DAP sessions.
    pub launcher: Launcher,
    /// What probe sessions are started with.
    pub probe_settings: ProbeSettings,
    /// Open inspectors.
    pub inspectors: Arc<Inspectors>,
    /// The database.
    pub store: Store,
    /// Session history, recorded and read.
    pub history: History,
    /// This replica's part in a cluster sharing PostgreSQL; none on SQLite.
    pub cluster: Option<Arc<Cluster>>,
    /// Cancelled when the daemon begins shutting down.
    pub shutdown: CancellationToken,
    /// Addresses actually served (known once bound).
    pub listen: OnceLock<Vec<String>>,
    /// Subscribe streams of clients, per daemon and per identity.
    pub subscribers: Arc<Slots>,
    /// Subscribe streams peer replicas follow this one's sessions on:
    /// neither capped by `--max-subscribers` (a cluster whose clients took
    /// every slot would stop showing this replica's sessions elsewhere) nor
    /// counted as subscribers (a sum over replicas would count them).
    pub relays: Arc<Slots>,
    /// What Subscribe streams hold for their clients, bounded for the daemon.
    pub subscriber_memory: Arc<SubscriberMemory>,
    /// Inspectors opened by Inspect, held by each identity (the daemon's
    /// cap is the inspectors' own, as pause commands open them too).
    pub inspectors_per_identity: Arc<Slots>,
}

impl Daemon {
    /// Opens the store, loads breakpoints and sets up the event bus.
    pub async fn open(config: Config) -> anyhow::Result<Self> {
        let instance_id = uuid::Uuid::now_v7().to_string();
        let store = Store::connect(
            &config.database_url,
            &config.data_dir,
            &format!("stepd/{instance_id}"),
        )
        .await?;
        let bus = event_bus(&config, &instance_id);
        let breakpoints = Arc::new(
            Breakpoints::load(Arc::new(store.clone()), bus.clone())
                .await
                .with_context(|| format!("loading breakpoints from {}", store.place()))?,
        );
        let pauses = Arc::new(
            PauseRegistry::new(bus.clone())
                .with_max_pending(config.max_pauses, config.max_pauses_per_identity),
        );
        let redactor = Arc::new(stepd_core::redact::Redactor::new(&config.redact));
        let inspectors = Arc::new(
            Inspectors::new(bus.clone(), config.inspector_idle, config.max_inspectors)
                .with_redactor(redactor.clone()),
        );
        let context = Context {
            bus: bus.clone(),
            pauses: pauses.clone(),
            breakpoints: breakpoints.clone(),
            inspectors: inspectors.clone(),
            redactor: redactor.clone(),
        };
        let sessions = Sessions::with_slots(Slots::with_total(
            "sessions",
            Cap {
                limit: "max_sessions_per_identity",
                max: config.max_sessions_per_identity,
            },
            Cap {
                limit: "max_sessions",
                max: config.max_sessions,
            },
        ));
        sessions.follow(bus.clone());
        let launcher = Launcher::new(
            context.clone(),
            DapSettings {
                max_frame_bytes: config.max_dap_frame_bytes,
                request_timeout: config.adapter_timeout,
            },
            sessions.clone(),
        );
        let probe_settings = ProbeSettings {
            hold_limit: config.hold_limit,
            max_pauses: config.max_probe_pauses,
            heartbeat_interval: config.heartbeat_interval,
        };
        let subscribers = subscriber_slots(&config);
        stepd_core::metrics::observe(&instance_id, {
            let (bus, subscribers) = (bus.clone(), subscribers.clone());
            move || own_counts(&bus, &subscribers)
        });
        let shutdown = CancellationToken::new();
        let cluster = Cluster::new(&store, &bus, &config.replica);
        let history = History::start(
            bus.clone(),
            store.clone(),
            config.history,
            config.history_retention,
            cluster.as_ref().map(Cluster::own),
        );
        Ok(Self {
            history,
            context,
            launcher,
            probe_settings,
            inspectors,
            instance_id,
            started: Instant::now(),
            pauses,
            bus,
            breakpoints,
            sessions,
            store,
            shutdown,
            cluster,
            listen: OnceLock::new(),
            subscribers,
            relays: Slots::unlimited("relay streams"),
            subscriber_memory: SubscriberMemory::new(config.subscriber_bytes_total),
            inspectors_per_identity: Slots::new(
                "inspectors",
                Cap {
                    limit: "max_inspectors_per_identity",
                    max: config.max_inspectors_per_identity,
                },
            ),
            config,
        })
    }

    /// The counts an operator asks about (GetStatus), the same the metrics
    /// export.
    pub fn counts(&self) -> Counts {
        counts(&self.bus, &self.subscribers)
    }

    /// Answers a pause as `who`: SendDebugInput and a DebugInput on a
    /// Subscribe stream both come here, so one role rule, one set of
    /// limits (`field` prefixes the offending field's name) and one way to
    /// the replica that holds the pause apply to both. `pause_resolved.by`
    /// is the authenticated identity, never the name a client gives itself.
    pub async fn answer_as(
        &self,
        who: &Identity,
        input: DebugInput,
        field: &str,
    ) -> ApiResult<SendDebugInputResponse> {
        crate::auth::roles::answer_pause(who)?;
        stepd_core::limits::debug_input(&input, field)?;
        let elsewhere = self
            .cluster
            .as_ref()
            .and_then(|cluster| Some((cluster, cluster.owner_of_pause(&input.key)?)));
        match elsewhere {
            Some((cluster, peer)) => cluster.answer_elsewhere(&peer, input, who).await,
            None => self.pauses.answer(input, who.name.clone()).await,
        }
    }
}

/// The daemon's event bus. Sequence numbers start at the start time in
/// microseconds, so cursors from an earlier instance always fall below
/// this one's.
fn event_bus(config: &Config, instance_id: &str) -> Arc<EventBus> {
    let first_seq = u64::try_from(stepd_core::time::now_us())
        .unwrap_or(1)
        .max(1);
    Arc::new(
        EventBus::new(
            instance_id.to_owned(),
            first_seq,
            config.subscriber_buffer,
            config.ring_capacity,
        )
        .with_ring_bytes(config.ring_bytes)
        .with_ring_bytes_total(config.ring_bytes_total),
    )
}

/// Subscribe streams, capped per identity and in all.
fn subscriber_slots(config: &Config) -> Arc<Slots> {
    Slots::with_total(
        "subscribers",
        Cap {
            limit: "max_subscribers_per_identity",
            max: config.max_subscribers_per_identity,
        },
        Cap {
            limit: "max_subscribers",
            max: config.max_subscribers,
        },
    )
}

/// The daemon's counts: its counters, the state view, the Subscribe slots.
fn counts(bus: &EventBus, subscribers: &Slots) -> Counts {
    let mut counts = Counts::of(bus.counters());
    bus.with_view(|v| v.tally(&mut counts, None));
    counts.subscribers = subscribers.total() as u64;
    counts
}

/// The counts of what this daemon itself runs, as its metrics report them:
/// another replica's sessions and pauses, shown here too, are that
/// replica's to report, so a sum over replicas counts each once.
fn own_counts(bus: &EventBus, subscribers: &Slots) -> Counts {
    let mut counts = Counts::of(bus.counters());
    bus.with_view(|v| v.tally(&mut counts, Some(bus.instance_id())));
    counts.subscribers = subscribers.total() as u64;
    counts
}
