//! `break add|list|rm|enable|disable`.

use crate::connect::client;
use std::path::Path;

use crate::connect::Channel;
use clap::{Args, Subcommand};
use prost_types::FieldMask;
use stepd_proto::v1::{
    AddBreakpointRequest, BaggageEntry, Breakpoint, BreakpointAction, BreakpointSpec, DataLocation,
    ExceptionFilters, FunctionLocation, ListBreakpointsRequest, ListBreakpointsResponse,
    ProbeMatch, RemoveBreakpointRequest, SourceLocation, UpdateBreakpointRequest,
    breakpoint_service_client::BreakpointServiceClient, breakpoint_spec::Location,
};

use crate::{
    exit::Failure,
    render::{
        breakpoints::{describe_location, table_text},
        print_json,
    },
};

/// Breakpoint subcommands.
#[derive(Debug, Subcommand)]
pub enum BreakCommand {
    /// Add a breakpoint: FILE:LINE[:COLUMN], or --function, --exception, --watch, --probe.
    Add(Box<AddArgs>),
    /// List breakpoints.
    List,
    /// Remove breakpoints by id.
    Rm {
        /// Breakpoint ids, e.g. bp-3.
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Enable breakpoints.
    Enable {
        /// Breakpoint ids.
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Disable breakpoints (they stay stored).
    Disable {
        /// Breakpoint ids.
        #[arg(required = true)]
        ids: Vec<String>,
    },
}

/// Arguments of `break add`.
#[derive(Debug, Args)]
pub struct AddArgs {
    /// Source location FILE:LINE[:COLUMN]; a relative FILE is made absolute.
    #[arg(conflicts_with_all = ["function", "exception", "probe", "watch"])]
    pub location: Option<String>,
    /// Break on entry to a function.
    #[arg(long)]
    pub function: Option<String>,
    /// Break on exceptions matching these adapter filter ids (repeatable).
    #[arg(long)]
    pub exception: Vec<String>,
    /// Break where this value is written (a data breakpoint; dlv, lldb-dap),
    /// resolved in the frame of a session's stop.
    #[arg(long, value_name = "EXPR")]
    pub watch: Option<String>,
    /// Hold at probe points of this kind ("" for any).
    #[arg(long)]
    pub probe: Option<String>,
    /// With --probe: glob over the point's name, e.g. 'web_*'.
    #[arg(long, requires = "probe")]
    pub name: Option<String>,
    /// With --probe: hold only requests whose W3C baggage carries KEY=VALUE
    /// (repeatable: all must); `stepctl baggage mint` makes one.
    #[arg(long, requires = "probe", value_name = "KEY=VALUE")]
    pub baggage: Vec<String>,
    /// Condition in the debuggee's language.
    #[arg(long)]
    pub condition: Option<String>,
    /// Hit condition: N, ==N, >N, >=N, <N, <=N or %N.
    #[arg(long)]
    pub hit_condition: Option<String>,
    /// Label selector choosing sessions, e.g. 'env=dev,agent in (main,sub)'.
    #[arg(long)]
    pub labels: Option<String>,
    /// Log this message ({expr} interpolated) instead of stopping.
    #[arg(long, conflicts_with = "snapshot")]
    pub log: Option<String>,
    /// Capture stack and locals, emit an event, and go on.
    #[arg(long)]
    pub snapshot: bool,
    /// Stop applying after this many hits.
    #[arg(long)]
    pub max_hits: Option<u32>,
    /// Stop applying after this long, e.g. 30m.
    #[arg(long, conflicts_with = "expires_at")]
    pub expires_in: Option<humantime::Duration>,
    /// Stop applying at this instant (RFC 3339).
    #[arg(long)]
    pub expires_at: Option<humantime::Timestamp>,
    /// Longest hold at a probe point, e.g. 5m.
    #[arg(long)]
    pub hold_limit: Option<humantime::Duration>,
    /// Add it disabled.
    #[arg(long)]
    pub disabled: bool,
}

pub fn parse_source(text: &str) -> Result<SourceLocation, Failure> {
    let usage = || Failure::Usage(format!("{text:?} is not FILE:LINE[:COLUMN]"));
    let (rest, last) = text.rsplit_once(':').ok_or_else(usage)?;
    let last: u32 = last.parse().map_err(|_| usage())?;
    // FILE:LINE:COLUMN when the part before the last colon is a number too.
    let (path, line, column) = match rest.rsplit_once(':') {
        Some((path, line)) if line.parse::<u32>().is_ok() => {
            (path, line.parse().unwrap_or(0), last)
        }
        _ => (rest, last, 0),
    };
    let path = if path.is_empty() || Path::new(path).is_absolute() {
        path.to_owned()
    } else {
        std::env::current_dir()
            .map(|cwd| cwd.join(path).display().to_string())
            .unwrap_or_else(|_| path.to_owned())
    };
    Ok(SourceLocation { path, line, column })
}

/// `KEY=VALUE` as a baggage entry; the daemon checks the syntax of each part.
fn parse_baggage(text: &str) -> Result<BaggageEntry, Failure> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| Failure::Usage(format!("--baggage {text:?} is not KEY=VALUE")))?;
    Ok(BaggageEntry {
        key: key.trim().to_owned(),
        value: value.trim().to_owned(),
    })
}

fn to_timestamp(t: std::time::SystemTime) -> prost_types::Timestamp {
    prost_types::Timestamp::from(t)
}

fn spec_from(args: AddArgs) -> Result<BreakpointSpec, Failure> {
    let location = if let Some(text) = &args.location {
        Location::Source(parse_source(text)?)
    } else if let Some(name) = args.function {
        Location::Function(FunctionLocation { name })
    } else if !args.exception.is_empty() {
        Location::Exception(ExceptionFilters {
            filter_ids: args.exception,
        })
    } else if let Some(expression) = args.watch {
        Location::Data(DataLocation {
            expression,
            ..Default::default()
        })
    } else if let Some(kind) = args.probe {
        Location::Probe(ProbeMatch {
            point_kind: kind,
            name_glob: args.name.unwrap_or_default(),
            baggage: args
                .baggage
                .iter()
                .map(|entry| parse_baggage(entry))
                .collect::<Result<_, _>>()?,
        })
    } else {
        return Err(Failure::Usage(
            "give FILE:LINE, --function, --exception, --watch or --probe".into(),
        ));
    };
    let action = if args.log.is_some() {
        BreakpointAction::Log
    } else if args.snapshot {
        BreakpointAction::Snapshot
    } else {
        BreakpointAction::Stop
    };
    let expires_at = match (args.expires_in, args.expires_at) {
        (Some(d), _) => Some(to_timestamp(std::time::SystemTime::now() + *d)),
        (None, Some(t)) => Some(to_timestamp(*t)),
        (None, None) => None,
    };
    Ok(BreakpointSpec {
        location: Some(location),
        enabled: Some(!args.disabled),
        condition: args.condition.unwrap_or_default(),
        hit_condition: args.hit_condition.unwrap_or_default(),
        label_selector: args.labels.unwrap_or_default(),
        expires_at,
        max_hits: args.max_hits.unwrap_or(0),
        action: action.into(),
        log_message: args.log.unwrap_or_default(),
        hold_limit: args
            .hold_limit
            .map(|d| prost_types::Duration::try_from(*d).unwrap_or_default()),
    })
}

/// Every breakpoint, page by page, so the listing is whole however large it is.
pub async fn all(
    client: &mut BreakpointServiceClient<Channel>,
) -> Result<Vec<Breakpoint>, tonic::Status> {
    let mut breakpoints = Vec::new();
    let mut request = ListBreakpointsRequest::default();
    loop {
        let page = client.list_breakpoints(request.clone()).await?.into_inner();
        breakpoints.extend(page.breakpoints);
        if page.next_page_token.is_empty() {
            return Ok(breakpoints);
        }
        request.page_token = page.next_page_token;
    }
}

/// Runs a breakpoint subcommand.
pub async fn run(channel: Channel, command: BreakCommand, json: bool) -> Result<(), Failure> {
    let mut client = client!(BreakpointServiceClient, channel);
    match command {
        BreakCommand::Add(args) => {
            let spec = spec_from(*args)?;
            let bp = client
                .add_breakpoint(AddBreakpointRequest { spec: Some(spec) })
                .await?
                .into_inner()
                .breakpoint
                .unwrap_or_default();
            if json {
                print_json(&bp);
            } else {
                println!("{} added at {}", bp.id, describe_location(&bp));
            }
        }
        BreakCommand::List => {
            let r = ListBreakpointsResponse {
                breakpoints: all(&mut client).await?,
                ..Default::default()
            };
            if json {
                print_json(&r);
            } else if r.breakpoints.is_empty() {
                println!("no breakpoints");
            } else {
                println!("{}", table_text(&r.breakpoints));
            }
        }
        BreakCommand::Rm { ids } => {
            for id in ids {
                let bp = client
                    .remove_breakpoint(RemoveBreakpointRequest { id })
                    .await?
                    .into_inner()
                    .breakpoint
                    .unwrap_or_default();
                if json {
                    print_json(&bp);
                } else {
                    println!("{} removed", bp.id);
                }
            }
        }
        BreakCommand::Enable { ids } => set_enabled(&mut client, ids, true, json).await?,
        BreakCommand::Disable { ids } => set_enabled(&mut client, ids, false, json).await?,
    }
    Ok(())
}

/// Sets `enabled` on each breakpoint through an update mask.
async fn set_enabled(
    client: &mut BreakpointServiceClient<Channel>,
    ids: Vec<String>,
    enabled: bool,
    json: bool,
) -> Result<(), Failure> {
    for id in ids {
        let bp = client
            .update_breakpoint(UpdateBreakpointRequest {
                id,
                spec: Some(BreakpointSpec {
                    enabled: Some(enabled),
                    ..Default::default()
                }),
                update_mask: Some(FieldMask {
                    paths: vec!["enabled".into()],
                }),
            })
            .await?
            .into_inner()
            .breakpoint
            .unwrap_or_default();
        if json {
            print_json(&bp);
        } else {
            println!("{} {}", bp.id, if enabled { "enabled" } else { "disabled" });
        }
    }
    Ok(())
}
