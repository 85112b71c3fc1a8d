//! Bad input on every RPC, on the real binary. For each method of every
//! `stepd.v1` service, both streams included, requests are built from the
//! method's descriptor: empty, malformed and truncated bytes, an unknown
//! field, and for every field down to three levels deep an unknown enum
//! value, oversized and NUL-holding strings, extreme numbers and a
//! `google.protobuf.Value` nested past the decoder's limit. Each must be
//! answered OK or with a typed status whose `ErrorInfo` reason is one of the
//! documented set; the daemon must answer Ping throughout and its log must
//! never show a panic. `BAD_INPUT_SHOW=1` lists the bad requests that were
//! answered OK, to look for input that should have been refused.

use std::{
    collections::{BTreeMap, HashMap},
    process::Stdio,
    sync::{Arc, Mutex},
    time::Duration,
};

use prost::Message as _;
use prost_reflect::{
    DescriptorPool, DynamicMessage, FieldDescriptor, Kind, MapKey, MessageDescriptor,
    MethodDescriptor, Value,
};
use stepd_e2e::{Daemon, Raw, TempDir, reason};
use stepd_proto::v1::{
    ConnectRequest, ErrorReason, Hello, PingRequest, SubscribeRequest, Watch,
    connect_request::Message as ProbeMessage, daemon_service_client::DaemonServiceClient,
    event::Payload, subscribe_request::Message as SubscribeMessage,
};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_stream::StreamExt as _;
use tonic::{Code, Status, codegen::http::uri::PathAndQuery, transport::Channel};

/// How long one call may take; a call still waiting then is waiting as
/// asked (a long `wait`), which is not a failure.
const PATIENCE: Duration = Duration::from_secs(3);
/// Calls in flight at once.
const PARALLEL: usize = 16;
/// An oversized string or bytes field.
const BIG: usize = 256 << 10;
/// Deeper than the protobuf decoder's recursion limit (100).
const NESTING: usize = 150;
/// Field depth explored below a request.
const DEPTH: usize = 3;

/// One bad request.
struct Case {
    what: String,
    bytes: Vec<u8>,
}

fn pool() -> DescriptorPool {
    DescriptorPool::decode(stepd_proto::FILE_DESCRIPTOR_SET).expect("stepd's descriptors")
}

/// A `google.protobuf.Value` holding a list holding a list … `depth` deep.
fn nested_value(pool: &DescriptorPool, depth: usize) -> DynamicMessage {
    let value = pool
        .get_message_by_name("google.protobuf.Value")
        .expect("Value");
    let list = pool
        .get_message_by_name("google.protobuf.ListValue")
        .expect("ListValue");
    let mut inner = DynamicMessage::new(value.clone());
    inner.set_field_by_name("string_value", Value::String("bottom".into()));
    for _ in 0..depth {
        let mut l = DynamicMessage::new(list.clone());
        l.set_field_by_name("values", Value::List(vec![Value::Message(inner)]));
        let mut v = DynamicMessage::new(value.clone());
        v.set_field_by_name("list_value", Value::Message(l));
        inner = v;
    }
    inner
}

/// The bad values tried for a field of `kind`.
fn extremes(pool: &DescriptorPool, kind: &Kind) -> Vec<(&'static str, Value)> {
    match kind {
        Kind::String => vec![
            ("oversized", Value::String("x".repeat(BIG))),
            ("NUL", Value::String("a\0b".into())),
            ("../ path", Value::String("../../etc/passwd".into())),
        ],
        Kind::Bytes => vec![("oversized", Value::Bytes(vec![0xff; BIG].into()))],
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => vec![
            ("min", Value::I32(i32::MIN)),
            ("-1", Value::I32(-1)),
            ("max", Value::I32(i32::MAX)),
        ],
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => vec![
            ("min", Value::I64(i64::MIN)),
            ("-1", Value::I64(-1)),
            ("max", Value::I64(i64::MAX)),
        ],
        Kind::Uint32 | Kind::Fixed32 => vec![("max", Value::U32(u32::MAX))],
        Kind::Uint64 | Kind::Fixed64 => vec![("max", Value::U64(u64::MAX))],
        Kind::Double => vec![
            ("NaN", Value::F64(f64::NAN)),
            ("inf", Value::F64(f64::INFINITY)),
        ],
        Kind::Float => vec![("NaN", Value::F32(f32::NAN))],
        Kind::Bool => vec![("true", Value::Bool(true))],
        Kind::Enum(_) => vec![("unknown enum", Value::EnumNumber(999))],
        Kind::Message(m) => match m.full_name() {
            "google.protobuf.Value" => vec![(
                "nested past the limit",
                Value::Message(nested_value(pool, NESTING)),
            )],
            "google.protobuf.Struct" => {
                let mut fields = HashMap::new();
                fields.insert(
                    MapKey::String("deep".into()),
                    Value::Message(nested_value(pool, NESTING)),
                );
                let mut s = DynamicMessage::new(m.clone());
                s.set_field_by_name("fields", Value::Map(fields));
                vec![("nested past the limit", Value::Message(s))]
            }
            _ => vec![("empty", Value::Message(DynamicMessage::new(m.clone())))],
        },
    }
}

/// Every field path below `message`, `depth` levels deep (maps and the
/// well-known types are leaves).
fn paths(message: &MessageDescriptor, depth: usize) -> Vec<Vec<FieldDescriptor>> {
    let mut out = Vec::new();
    for field in message.fields() {
        out.push(vec![field.clone()]);
        if depth > 1
            && !field.is_map()
            && let Kind::Message(sub) = field.kind()
            && !sub.full_name().starts_with("google.protobuf.")
            && sub.full_name() != message.full_name()
        {
            for rest in paths(&sub, depth - 1) {
                let mut path = vec![field.clone()];
                path.extend(rest);
                out.push(path);
            }
        }
    }
    out
}

/// `value` as what `field` holds (one element of a list; a map entry).
fn shaped(field: &FieldDescriptor, value: Value) -> Value {
    if field.is_map() {
        let Kind::Message(entry) = field.kind() else {
            unreachable!()
        };
        let key = match value.as_str() {
            Some(s) => MapKey::String(s.to_owned()),
            None => MapKey::String("k".into()),
        };
        let value_field = entry.map_entry_value_field();
        let value = match value_field.kind() {
            Kind::String => value.as_str().map_or_else(
                || Value::String("v".into()),
                |s| Value::String(s.to_owned()),
            ),
            kind => Value::default_value(&kind),
        };
        Value::Map(HashMap::from([(key, value)]))
    } else if field.is_list() {
        Value::List(vec![value])
    } else {
        value
    }
}

fn set(message: &mut DynamicMessage, path: &[FieldDescriptor], leaf: Value) {
    let (field, rest) = path.split_first().expect("a field");
    if rest.is_empty() {
        message.set_field(field, shaped(field, leaf));
        return;
    }
    let Kind::Message(sub) = field.kind() else {
        unreachable!("only message fields have fields")
    };
    let mut child = DynamicMessage::new(sub);
    set(&mut child, rest, leaf);
    message.set_field(field, shaped(field, Value::Message(child)));
}

fn cases(pool: &DescriptorPool, input: &MessageDescriptor) -> Vec<Case> {
    let mut out = vec![
        Case {
            what: "empty".into(),
            bytes: Vec::new(),
        },
        Case {
            what: "malformed".into(),
            bytes: vec![0x0a, 0xff],
        },
        Case {
            what: "truncated varint".into(),
            bytes: vec![0x08, 0xff],
        },
        Case {
            what: "unknown field".into(),
            bytes: vec![0xb8, 0x3e, 0x01],
        },
    ];
    for path in paths(input, DEPTH) {
        let leaf = path.last().expect("a field");
        let kind = if leaf.is_map() {
            Kind::String
        } else {
            leaf.kind()
        };
        let name: Vec<&str> = path.iter().map(FieldDescriptor::name).collect();
        for (label, value) in extremes(pool, &kind) {
            let mut message = DynamicMessage::new(input.clone());
            set(&mut message, &path, value);
            out.push(Case {
                what: format!("{} {label}", name.join(".")),
                bytes: message.encode_to_vec(),
            });
        }
    }
    out
}

/// Every documented reason, as the ErrorInfo names it.
fn documented() -> Vec<String> {
    (1..200)
        .filter_map(|n| ErrorReason::try_from(n).ok())
        .filter(|r| *r != ErrorReason::Internal)
        .map(|r| {
            r.as_str_name()
                .trim_start_matches("ERROR_REASON_")
                .to_owned()
        })
        .collect()
}

/// What a bad request got, or why that answer is wrong.
enum Outcome {
    Answered,
    Refused(String),
    StillWaiting,
}

fn judge(status: &Status, reasons: &[String]) -> Result<Outcome, String> {
    let got = reason(status);
    if matches!(status.code(), Code::Unknown | Code::Internal) || !reasons.contains(&got) {
        return Err(format!("{:?} {got:?}: {}", status.code(), status.message()));
    }
    Ok(Outcome::Refused(got))
}

async fn call(
    channel: Channel,
    method: &MethodDescriptor,
    bytes: Vec<u8>,
    reasons: &[String],
) -> Result<Outcome, String> {
    let path = PathAndQuery::try_from(format!(
        "/{}/{}",
        method.parent_service().full_name(),
        method.name()
    ))
    .expect("a method path");
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.map_err(|e| e.to_string())?;
    // Errors a stream reports as messages (a Subscribe `error` event, a
    // probe's `HitRefused`) rather than by ending.
    let mut stream_errors: Vec<i32> = Vec::new();
    let answer = tokio::time::timeout(PATIENCE, async {
        if method.is_client_streaming() {
            // The bad message first, then the same after a good one.
            let first = match method.input().full_name() {
                "stepd.v1.SubscribeRequest" => SubscribeRequest {
                    message: Some(SubscribeMessage::Watch(Watch::default())),
                }
                .encode_to_vec(),
                _ => ConnectRequest {
                    message: Some(ProbeMessage::Hello(Hello {
                        name: "bad-input".into(),
                        ..Default::default()
                    })),
                }
                .encode_to_vec(),
            };
            for messages in [vec![bytes.clone()], vec![first, bytes.clone()]] {
                let stream = tokio_stream::iter(messages).chain(tokio_stream::pending());
                match grpc
                    .streaming(tonic::Request::new(stream), path.clone(), Raw)
                    .await
                {
                    Err(status) => return Some(Err(status)),
                    Ok(response) => {
                        let mut inbound = response.into_inner();
                        // Read what comes; an error ends the test of this stream.
                        while let Ok(next) =
                            tokio::time::timeout(PATIENCE / 3, inbound.message()).await
                        {
                            match next {
                                Ok(Some(bytes)) => {
                                    stream_errors
                                        .extend(stream_error(method.output().full_name(), &bytes));
                                }
                                Ok(None) => break,
                                Err(status) => return Some(Err(status)),
                            }
                        }
                    }
                }
                grpc.ready().await.ok()?;
            }
            Some(Ok(()))
        } else if method.is_server_streaming() {
            match grpc
                .server_streaming(tonic::Request::new(bytes), path, Raw)
                .await
            {
                Err(status) => Some(Err(status)),
                Ok(response) => {
                    let mut inbound = response.into_inner();
                    loop {
                        match inbound.message().await {
                            Ok(Some(_)) => {}
                            Ok(None) => return Some(Ok(())),
                            Err(status) => return Some(Err(status)),
                        }
                    }
                }
            }
        } else {
            Some(
                grpc.unary(tonic::Request::new(bytes), path, Raw)
                    .await
                    .map(|_| ()),
            )
        }
    })
    .await;
    for reason in &stream_errors {
        let named = ErrorReason::try_from(*reason)
            .map(|r| {
                r.as_str_name()
                    .trim_start_matches("ERROR_REASON_")
                    .to_owned()
            })
            .unwrap_or_default();
        if !reasons.contains(&named) {
            return Err(format!("a stream error with reason {reason} ({named:?})"));
        }
    }
    if let (Ok(Some(Ok(()))) | Err(_), Some(first)) = (&answer, stream_errors.first()) {
        let named = ErrorReason::try_from(*first).map(|r| {
            r.as_str_name()
                .trim_start_matches("ERROR_REASON_")
                .to_owned()
        });
        return Ok(Outcome::Refused(named.unwrap_or_default()));
    }
    match answer {
        Err(_) => Ok(Outcome::StillWaiting),
        Ok(None) => Err("the connection broke".into()),
        Ok(Some(Ok(()))) => Ok(Outcome::Answered),
        Ok(Some(Err(status))) => judge(&status, reasons),
    }
}

/// The reason of an error a stream sent as a message, if this is one.
fn stream_error(output: &str, bytes: &[u8]) -> Option<i32> {
    use stepd_proto::v1::{ConnectResponse, SubscribeResponse, connect_response::Message as Out};
    if output == "stepd.v1.SubscribeResponse"
        && let Ok(response) = SubscribeResponse::decode(bytes)
        && let Some(Payload::Error(error)) = response.event.and_then(|e| e.payload)
    {
        return Some(error.reason);
    }
    if output == "stepd.v1.ConnectResponse"
        && let Ok(ConnectResponse {
            message: Some(Out::Refused(refused)),
        }) = ConnectResponse::decode(bytes)
    {
        return Some(refused.error.map_or(0, |e| e.reason));
    }
    None
}

async fn alive(channel: Channel) {
    DaemonServiceClient::new(channel)
        .ping(PingRequest::default())
        .await
        .expect("the daemon still answers Ping");
}

#[tokio::test]
async fn every_rpc_answers_bad_input_with_a_typed_status_and_the_daemon_lives() {
    let dir = TempDir::new("bad");
    let mut command = Daemon::command(dir.path(), &["--no-unix-socket"]);
    command.env("RUST_LOG", "warn").stderr(Stdio::piped());
    let mut daemon = Daemon::spawn(command, dir.path()).await;
    let log = Arc::new(Mutex::new(String::new()));
    let mut lines = BufReader::new(daemon.child.stderr.take().unwrap()).lines();
    let kept = log.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            let mut log = kept.lock().unwrap();
            log.push_str(&line);
            log.push('\n');
        }
    });

    let pool = pool();
    let reasons = Arc::new(documented());
    let channel = daemon.channel().await;
    let mut methods: Vec<MethodDescriptor> = pool
        .services()
        .filter(|s| s.package_name() == "stepd.v1")
        .flat_map(|s| s.methods().collect::<Vec<_>>())
        .collect();
    // Shutdown goes last: a good request to it stops the daemon.
    methods.sort_by_key(|m| m.name() == "Shutdown");
    let mut tried: BTreeMap<String, usize> = BTreeMap::new();
    let mut refused: BTreeMap<String, usize> = BTreeMap::new();
    let mut failures = Vec::new();
    for method in &methods {
        let name = format!("{}/{}", method.parent_service().name(), method.name());
        let mut all = cases(&pool, &method.input());
        if method.name() == "Shutdown" {
            all.retain(|c| c.what == "malformed" || c.what == "truncated varint");
        }
        let semaphore = Arc::new(tokio::sync::Semaphore::new(PARALLEL));
        let mut set = tokio::task::JoinSet::new();
        for case in all {
            let (channel, method, reasons) = (channel.clone(), method.clone(), reasons.clone());
            let permit = semaphore.clone().acquire_owned().await.unwrap();
            set.spawn(async move {
                let outcome = call(channel, &method, case.bytes, &reasons).await;
                drop(permit);
                (case.what, outcome)
            });
        }
        while let Some(done) = set.join_next().await {
            let (what, outcome) = done.unwrap();
            *tried.entry(name.clone()).or_default() += 1;
            match outcome {
                Ok(Outcome::Refused(reason)) => {
                    *refused.entry(format!("{name} {reason}")).or_default() += 1;
                }
                Ok(Outcome::Answered | Outcome::StillWaiting) => {
                    if std::env::var_os("BAD_INPUT_SHOW").is_some() {
                        eprintln!("  accepted {name} [{what}]");
                    }
                }
                Err(why) => failures.push(format!("{name} [{what}]: {why}")),
            }
        }
        alive(channel.clone()).await;
    }
    let total: usize = tried.values().sum();
    eprintln!("{total} bad requests on {} methods", tried.len());
    for (method, n) in &tried {
        eprintln!("  {method}: {n}");
    }
    for (what, n) in &refused {
        eprintln!("  refused {what}: {n}");
    }
    assert!(tried.len() >= 40, "every RPC was tried: {:?}", tried.keys());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    alive(channel).await;
    assert!(daemon.child.try_wait().unwrap().is_none(), "stepd exited");
    daemon.stop().await;
    let log = log.lock().unwrap().clone();
    assert!(
        !log.contains("panicked") && !log.contains("overflowed its stack"),
        "{log}"
    );
}
