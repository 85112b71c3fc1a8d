//! The server-side inspector against real adapter values: debugpy (a
//! ten-million-element list, nested dicts and lists, an object) and lldb-dap
//! (a C struct and array); every RPC and every bad input. Probe (JSON) values
//! are covered by the unit tests of `server/src/inspector/`.

use stepd_e2e::{
    Daemon, Subscription, TempDir, dap, fixture, line_of, reason, source_spec,
    tmux::{Tmux, stepctl_command},
    watched,
};
use stepd_proto::v1::{
    ClearRequest, ContinueRequest, EvaluateRequest, FrameExpression, InspectRequest, InspectSource,
    InspectorConfig, NextPageRequest, NextSiblingRequest, Pause, PinValueRequest, PopRequest,
    PreviousPageRequest, PreviousSiblingRequest, PrintValueRequest, PushRequest, RefreshRequest,
    RenderItem, Rendering, ShowAnalyticsRequest, TapIndexedRequest, TapValueRequest,
    TogglePrettyPrintRequest, ToggleViewModeRequest, ViewMode, Watch, event::Payload,
    inspect_source::Source, inspector_service_client::InspectorServiceClient, render_item::Item,
};
use tonic::{Code, transport::Channel};

type Client = InspectorServiceClient<Channel>;

fn text(r: &Rendering) -> String {
    r.items
        .iter()
        .map(|i: &RenderItem| match &i.item {
            Some(Item::Text(t)) => t.clone(),
            Some(Item::Newline(_)) => "\n".into(),
            Some(Item::Value(v)) => v.repr.clone(),
            None => String::new(),
        })
        .collect()
}

/// (idx, repr) of the value items.
fn values(r: &Rendering) -> Vec<(u32, String)> {
    r.items
        .iter()
        .filter_map(|i| match &i.item {
            Some(Item::Value(v)) => Some((v.idx, v.repr.clone())),
            _ => None,
        })
        .collect()
}

fn total(r: &Rendering) -> Option<u64> {
    r.page.as_ref().and_then(|p| p.total)
}

async fn open(
    client: &mut Client,
    session: &str,
    source: Source,
) -> Result<Rendering, tonic::Status> {
    client
        .inspect(InspectRequest {
            session_id: session.into(),
            source: Some(InspectSource {
                source: Some(source),
            }),
            config: None,
        })
        .await
        .map(|r| r.into_inner().rendering.unwrap())
}

fn expr(code: &str) -> Source {
    Source::Expression(FrameExpression {
        code: code.into(),
        ..Default::default()
    })
}

async fn push(client: &mut Client, id: &str, idx: u32) -> Result<Rendering, tonic::Status> {
    client
        .push(PushRequest {
            inspector_id: id.into(),
            idx,
        })
        .await
        .map(|r| r.into_inner().rendering.unwrap())
}

async fn pop(client: &mut Client, id: &str) -> Rendering {
    client
        .pop(PopRequest {
            inspector_id: id.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .rendering
        .unwrap()
}

async fn next_page(client: &mut Client, id: &str) -> Result<Rendering, tonic::Status> {
    client
        .next_page(NextPageRequest {
            inspector_id: id.into(),
        })
        .await
        .map(|r| r.into_inner().rendering.unwrap())
}

fn invalid(status: tonic::Status) {
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert_eq!(reason(&status), "INVALID_ARGUMENT", "{status:?}");
}

async fn print(client: &mut Client, id: &str, chunk_size: u32) -> (String, usize) {
    let mut stream = client
        .print_value(PrintValueRequest {
            inspector_id: id.into(),
            chunk_size,
        })
        .await
        .unwrap()
        .into_inner();
    let mut out = String::new();
    let mut n = 0;
    while let Some(chunk) = stream.message().await.unwrap() {
        n += 1;
        out.push_str(&chunk.chunk);
        if chunk.last {
            break;
        }
    }
    (out, n)
}

/// A daemon stopped in biglist.py at `inspect`.
async fn biglist(args: &[&str]) -> (Daemon, Subscription, String, Pause) {
    let daemon = Daemon::start(args).await;
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    sub.next().await;
    let program = fixture("python/biglist.py");
    let path = program.to_str().unwrap();
    dap::add_breakpoint(&daemon, source_spec(path, line_of(&program, "inspect"))).await;
    let session = dap::launch(&daemon, "debugpy", path, &[])
        .await
        .session
        .unwrap();
    let pause = dap::next_pause(&mut sub, &session.id).await;
    (daemon, sub, session.id, pause)
}

#[tokio::test]
async fn a_ten_million_element_python_list_pages_and_navigates() {
    let (daemon, _sub, session, _) = biglist(&[]).await;
    let mut c = InspectorServiceClient::new(daemon.channel().await);
    let root = open(&mut c, &session, expr("big")).await.unwrap();
    let id = root.inspector_id.clone();
    assert_eq!(root.r#type, "list");
    assert_eq!(total(&root), Some(10_000_000));
    let page = root.page.unwrap();
    assert_eq!(
        (page.page, page.page_count, page.page_size),
        (0, Some(312_500), 32)
    );
    let first = values(&root);
    assert_eq!(first.len(), 32);
    assert_eq!(first[0], (0, "0".into()));
    assert_eq!(first[31], (31, "31".into()));
    assert!(
        // debugpy's "special variables", "function variables" and `len()`
        // are not named children of the list.
        text(&root).contains("Count: 10000000 (10000000 indexed, 0 named)"),
        "{}",
        text(&root)
    );

    let second = next_page(&mut c, &id).await.unwrap();
    assert_eq!(values(&second)[0], (32, "32".into()));
    // Past debugpy's first 100 children: paged by slicing.
    for _ in 0..3 {
        next_page(&mut c, &id).await.unwrap();
    }
    let fifth = c
        .previous_page(PreviousPageRequest {
            inspector_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .rendering
        .unwrap();
    assert_eq!(fifth.page.unwrap().page, 3);
    assert_eq!(values(&fifth)[0], (96, "96".into()));
    assert_eq!(values(&fifth)[31], (127, "127".into()));

    // A page larger than what debugpy lists at once, deep in the list.
    let wide = c
        .refresh(RefreshRequest {
            inspector_id: id.clone(),
            config: Some(InspectorConfig {
                page_size: Some(250),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .rendering
        .unwrap();
    assert_eq!(wide.config.as_ref().unwrap().page_size, Some(250));
    assert_eq!(
        wide.page.as_ref().unwrap().page,
        0,
        "item 96 stays on page 0"
    );
    let v = values(&wide);
    assert_eq!(v.len(), 250);
    assert_eq!(v[249], (249, "249".into()));

    // Straight to an element in the middle, then its neighbours.
    let deep = push(&mut c, &id, 5_000_000).await.unwrap();
    assert_eq!(deep.path, "[5000000]");
    assert!(text(&deep).contains("Value: 5000000"), "{}", text(&deep));
    invalid(push(&mut c, &id, 0).await.unwrap_err());
    let next = c
        .next_sibling(NextSiblingRequest {
            inspector_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .rendering
        .unwrap();
    assert_eq!(next.path, "[5000001]");
    let prev = c
        .previous_sibling(PreviousSiblingRequest {
            inspector_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .rendering
        .unwrap();
    assert_eq!(prev.path, "[5000000]");
    let back = pop(&mut c, &id).await;
    assert_eq!(back.path, "");
    assert_eq!(back.page.unwrap().page, 0);
    assert_eq!(values(&back).len(), 250, "the configuration persisted");

    // Bad input: an index past the end, the root's siblings, a page past the end.
    invalid(push(&mut c, &id, 10_000_000).await.unwrap_err());
    invalid(
        c.next_sibling(NextSiblingRequest {
            inspector_id: id.clone(),
        })
        .await
        .unwrap_err(),
    );
    let last = push(&mut c, &id, 9_999_999).await.unwrap();
    assert_eq!(last.path, "[9999999]");
    invalid(
        c.next_sibling(NextSiblingRequest {
            inspector_id: id.clone(),
        })
        .await
        .unwrap_err(),
    );
    pop(&mut c, &id).await;

    // Analytics stop at the cutoff and say so.
    let a = c
        .show_analytics(ShowAnalyticsRequest {
            inspector_id: id.clone(),
            cutoff: 300,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(a.analysed, 300);
    assert!(a.cut_off);
    let shown = text(&a.rendering.unwrap());
    assert!(
        shown.contains("first 300 of 10000000 elements (cut off at 300)"),
        "{shown}"
    );
    assert!(
        shown.contains("numbers: 300, min 0, max 299, mean 149.500, zeros 1"),
        "{shown}"
    );
    daemon.stop().await;
}

#[tokio::test]
async fn nested_python_values_objects_locals_and_every_rpc() {
    let (daemon, mut sub, session, pause) = biglist(&[]).await;
    let mut c = InspectorServiceClient::new(daemon.channel().await);

    // Nested dicts, lists and tuples, with paths from the root.
    let nested = open(&mut c, &session, expr("nested")).await.unwrap();
    let id = nested.inspector_id.clone();
    assert_eq!(nested.r#type, "dict");
    assert_eq!(
        values(&nested),
        vec![
            (0, "[1, 2, {'b': [...]}]".into()),
            (1, "None".into()),
            (2, "(5, 6)".into())
        ]
    );
    assert!(text(&nested).contains("  'a' = "), "{}", text(&nested));
    push(&mut c, &id, 0).await.unwrap();
    push(&mut c, &id, 2).await.unwrap();
    let b = push(&mut c, &id, 0).await.unwrap();
    assert_eq!(b.path, "['a'][2]['b']");
    assert_eq!(b.r#type, "list");
    let c_ = push(&mut c, &id, 2).await.unwrap();
    let deep = push(&mut c, &id, 0).await.unwrap();
    assert_eq!(deep.path, "['a'][2]['b'][2]['c']");
    assert!(text(&deep).contains("Value: 'deep'"), "{}", text(&deep));
    assert_eq!(c_.r#type, "dict");

    // PrintValue streams the whole value in chunks.
    pop(&mut c, &id).await;
    pop(&mut c, &id).await;
    pop(&mut c, &id).await;
    pop(&mut c, &id).await;
    let (printed, chunks) = print(&mut c, &id, 0).await;
    pop(&mut c, &id).await;
    let (whole, many) = print(&mut c, &id, 8).await;
    assert_eq!(printed, "[1, 2, {'b': [3, 4, {'c': 'deep'}]}]");
    assert_eq!(chunks, 1);
    assert_eq!(
        whole,
        "{'a': [1, 2, {'b': [3, 4, {'c': 'deep'}]}], 'n': None, 't': (5, 6)}"
    );
    // Chunks below 1 KiB are raised to it (docs/reliability.md).
    assert_eq!(many, whole.len().div_ceil(1024));

    // PinValue: the value gets a name later evaluations see.
    push(&mut c, &id, 2).await.unwrap();
    let pinned = c
        .pin_value(PinValueRequest {
            inspector_id: id.clone(),
            name: "pinned_t".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(pinned.name, "pinned_t");
    let seen = dap::sessions(&daemon)
        .await
        .evaluate(EvaluateRequest {
            session_id: session.clone(),
            expression: "pinned_t[1] * 10".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    assert_eq!(seen.value, "60");
    invalid(
        c.pin_value(PinValueRequest {
            inspector_id: id.clone(),
            name: "not a name".into(),
        })
        .await
        .unwrap_err(),
    );

    // Tap: events, and a tapped value opens in a new inspector.
    c.tap_value(TapValueRequest {
        inspector_id: id.clone(),
    })
    .await
    .unwrap();
    let tap = sub
        .wait_for("a tap event", |e| {
            matches!(e.payload, Some(Payload::Tap(_)))
        })
        .await;
    let Some(Payload::Tap(t)) = &tap.payload else {
        unreachable!()
    };
    assert_eq!(t.path, "['t']");
    assert_eq!(t.value.as_ref().unwrap().text, "(5, 6)");
    assert_eq!(tap.session_id, session);
    c.tap_indexed(TapIndexedRequest {
        inspector_id: id.clone(),
        idx: 1,
    })
    .await
    .unwrap();
    let indexed = sub
        .wait_for("a tap event", |e| {
            matches!(e.payload, Some(Payload::Tap(_)))
        })
        .await;
    let Some(Payload::Tap(t)) = &indexed.payload else {
        unreachable!()
    };
    assert_eq!(t.path, "['t'][1]");
    assert_eq!(t.value.as_ref().unwrap().text, "6");
    invalid(
        c.tap_indexed(TapIndexedRequest {
            inspector_id: id.clone(),
            idx: 2,
        })
        .await
        .unwrap_err(),
    );
    let from_tap = open(&mut c, "", Source::TapSeq(tap.seq)).await.unwrap();
    assert_eq!(values(&from_tap), vec![(0, "5".into()), (1, "6".into())]);
    invalid(open(&mut c, "", Source::TapSeq(1)).await.unwrap_err());

    // An object: attributes in NORMAL, raw fields (with debugpy's groups) in OBJECT.
    let point = open(&mut c, &session, expr("point")).await.unwrap();
    let pid = point.inspector_id.clone();
    assert_eq!(point.r#type, "Point");
    assert!(text(&point).contains("  x = 3"), "{}", text(&point));
    assert!(
        text(&point).contains("  label = 'p(3,4)'"),
        "{}",
        text(&point)
    );
    invalid(next_page(&mut c, &pid).await.unwrap_err());
    let object = c
        .toggle_view_mode(ToggleViewModeRequest {
            inspector_id: pid.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .rendering
        .unwrap();
    assert_eq!(object.view_mode, ViewMode::Object as i32);
    assert!(
        text(&object).contains("special variables"),
        "{}",
        text(&object)
    );
    let normal = c
        .toggle_view_mode(ToggleViewModeRequest {
            inspector_id: pid.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .rendering
        .unwrap();
    assert_eq!(normal.view_mode, ViewMode::Normal as i32);
    let pretty = c
        .toggle_pretty_print(TogglePrettyPrintRequest {
            inspector_id: pid.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .rendering
        .unwrap();
    assert_eq!(pretty.config.unwrap().pretty_print, Some(true));

    // A table of records.
    let rows = open(
        &mut c,
        &session,
        expr("[{'n': i, 'sq': i * i} for i in range(3)] + [{'n': 9}]"),
    )
    .await
    .unwrap();
    let table = c
        .toggle_view_mode(ToggleViewModeRequest {
            inspector_id: rows.inspector_id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .rendering
        .unwrap();
    assert_eq!(table.view_mode, ViewMode::Table as i32);
    let shown = text(&table);
    assert!(shown.contains("| 'n' | 'sq'"), "{shown}");
    assert!(shown.contains("[2] | 2   | 4"), "{shown}");
    assert!(shown.contains("[3] | 9   |"), "a ragged row: {shown}");

    // The pause's locals and value (the paused frame).
    let locals = open(&mut c, "", Source::PauseLocals(pause.key.clone()))
        .await
        .unwrap();
    let names = text(&locals);
    for name in ["big = ", "nested = ", "point = "] {
        assert!(names.contains(name), "{name} in {names}");
    }
    let frame = open(&mut c, "", Source::PauseValue(pause.key.clone()))
        .await
        .unwrap();
    assert!(text(&frame).contains("Locals"), "{}", text(&frame));

    // Clear, then the id is gone.
    c.clear(ClearRequest {
        inspector_id: id.clone(),
    })
    .await
    .unwrap();
    let gone = push(&mut c, &id, 0).await.unwrap_err();
    assert_eq!(gone.code(), Code::NotFound);
    assert_eq!(reason(&gone), "INSPECTOR_NOT_FOUND");

    // The program moves on: the inspected values are stale.
    dap::sessions(&daemon)
        .await
        .r#continue(ContinueRequest {
            session_id: session.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    let stale = c
        .refresh(RefreshRequest {
            inspector_id: pid.clone(),
            config: None,
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&stale), "STALE_HANDLE", "{stale:?}");
    daemon.stop().await;
}

#[tokio::test]
async fn bad_sources_unknown_ids_and_the_cap() {
    let (daemon, _sub, session, _) = biglist(&["--max-inspectors", "2"]).await;
    let mut c = InspectorServiceClient::new(daemon.channel().await);
    let missing = c.inspect(InspectRequest::default()).await.unwrap_err();
    invalid(missing);
    let no_pause = open(&mut c, "", Source::PauseValue("p-nonexistent".into()))
        .await
        .unwrap_err();
    assert_eq!(reason(&no_pause), "PAUSE_NOT_FOUND");
    let no_session = open(&mut c, "nonexistent", expr("big")).await.unwrap_err();
    assert_eq!(reason(&no_session), "SESSION_NOT_FOUND");
    let no_exception = open(&mut c, "", Source::LastExceptionSessionId(session.clone()))
        .await
        .unwrap_err();
    assert_eq!(reason(&no_exception), "NOT_STOPPED");
    let stale = open(&mut c, &session, Source::VariablesRef("0.1".into()))
        .await
        .unwrap_err();
    assert_eq!(reason(&stale), "STALE_HANDLE");
    let unknown = pop_err(&mut c, "i-nonexistent").await;
    assert_eq!(unknown.code(), Code::NotFound);
    assert_eq!(reason(&unknown), "INSPECTOR_NOT_FOUND");
    let bad_config = c
        .inspect(InspectRequest {
            session_id: session.clone(),
            source: Some(InspectSource {
                source: Some(expr("big")),
            }),
            config: Some(InspectorConfig {
                page_size: Some(0),
                ..Default::default()
            }),
        })
        .await
        .unwrap_err();
    invalid(bad_config);
    let one = open(&mut c, &session, expr("nested")).await.unwrap();
    open(&mut c, &session, expr("point")).await.unwrap();
    let full = open(&mut c, &session, expr("big")).await.unwrap_err();
    assert_eq!(full.code(), Code::ResourceExhausted);
    assert_eq!(reason(&full), "LIMIT_EXCEEDED");
    c.clear(ClearRequest {
        inspector_id: one.inspector_id,
    })
    .await
    .unwrap();
    open(&mut c, &session, expr("big")).await.unwrap();
    daemon.stop().await;
}

async fn pop_err(c: &mut Client, id: &str) -> tonic::Status {
    c.pop(PopRequest {
        inspector_id: id.into(),
    })
    .await
    .unwrap_err()
}

#[tokio::test]
async fn a_c_struct_and_array_under_lldb_dap() {
    let (daemon, mut sub) = watched().await;
    let source = fixture("c/hello.c");
    dap::add_breakpoint(
        &daemon,
        source_spec(source.to_str().unwrap(), line_of(&source, "step")),
    )
    .await;
    let session = dap::launch_c_hello(&daemon).await;
    let pause = dap::next_pause(&mut sub, &session.id).await;
    let mut c = InspectorServiceClient::new(daemon.channel().await);

    let p = open(&mut c, &session.id, expr("p")).await.unwrap();
    let id = p.inspector_id.clone();
    assert_eq!(p.r#type, "point");
    let shown = text(&p);
    assert!(shown.contains("  x = 0\n"), "{shown}");
    assert!(shown.contains("  y = 1\n"), "{shown}");
    assert!(shown.contains("\"p\""), "{shown}");
    let y = push(&mut c, &id, 1).await.unwrap();
    assert_eq!(y.path, ".y");
    assert!(text(&y).contains("Value: 1"), "{}", text(&y));
    invalid(push(&mut c, &id, 0).await.unwrap_err());
    pop(&mut c, &id).await;
    let (printed, _) = print(&mut c, &id, 0).await;
    assert!(printed.starts_with("{x = 0, y = 1, name = "), "{printed}");
    // lldb pins as a persistent `$` variable, and says so in the answer.
    let pin = c
        .pin_value(PinValueRequest {
            inspector_id: id.clone(),
            name: "pinned".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(pin.name, "$pinned");
    let seen = dap::sessions(&daemon)
        .await
        .evaluate(EvaluateRequest {
            session_id: session.id.clone(),
            expression: "$pinned.y * 10".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    assert_eq!(seen.value, "10");

    let values_ = open(&mut c, &session.id, expr("values")).await.unwrap();
    let vid = values_.inspector_id.clone();
    assert_eq!(total(&values_), Some(3));
    assert_eq!(
        values(&values_),
        vec![(0, "0".into()), (1, "1".into()), (2, "2".into())]
    );
    let second = push(&mut c, &vid, 2).await.unwrap();
    assert_eq!(second.path, "[2]");
    invalid(push(&mut c, &vid, 0).await.unwrap_err());
    pop(&mut c, &vid).await;
    invalid(push(&mut c, &vid, 3).await.unwrap_err());
    invalid(next_page(&mut c, &vid).await.unwrap_err());
    let a = c
        .show_analytics(ShowAnalyticsRequest {
            inspector_id: vid.clone(),
            cutoff: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((a.analysed, a.cut_off), (3, false));
    let shown = text(&a.rendering.unwrap());
    assert!(
        shown.contains("numbers: 3, min 0, max 2, mean 1, zeros 1"),
        "{shown}"
    );

    let locals = open(&mut c, "", Source::PauseLocals(pause.key.clone()))
        .await
        .unwrap();
    let names = text(&locals);
    for name in ["doubled = ", "p = ", "values = "] {
        assert!(names.contains(name), "{name} in {names}");
    }
    daemon.stop().await;
}

/// `stepctl inspect` through a real terminal (see `stepd_e2e::tmux`).
#[tokio::test]
async fn stepctl_inspect_navigates_interactively_at_a_terminal() {
    let (daemon, _sub, session, _) = biglist(&[]).await;
    let dir = TempDir::new("insp-term");
    let history = dir.path().join("history");
    let t = Tmux::start(&stepctl_command(
        &daemon.addr,
        &history,
        &["inspect", &session, "big", "--page-size", "8"],
    ));
    t.wait_count("  [7] 7", 1).await;
    t.wait_count("page 1/1250000", 1).await;
    t.wait_count("inspect> ", 1).await;
    t.type_line("n");
    t.wait_count("  [15] 15", 1).await;
    t.type_line("5000000");
    t.wait_count("── [5000000] (int)", 1).await;
    t.wait_count("Value: 5000000", 1).await;
    t.type_line("]");
    t.wait_count("── [5000001] (int)", 1).await;
    t.type_line("u");
    t.wait_count("page 2/1250000", 2).await;
    t.type_line("p");
    t.wait_count("page 1/1250000", 2).await;
    t.type_line("v");
    t.wait_count("--- Table:", 1).await;
    t.type_line("a 100");
    t.wait_count("first 100 of 10000000 elements (cut off at 100)", 1)
        .await;
    t.type_line("10000000");
    t.wait_count("index 10000000 does not exist", 1).await;
    // The line editor of `stepctl debug`: Tab completes, Up recalls.
    t.type_text("hel");
    t.keys(&["Tab"]);
    t.keys(&["Enter"]);
    t.wait_count("descend into the child with index N", 1).await;
    t.keys(&["Up", "Up"]);
    t.keys(&["Enter"]);
    t.wait_count("index 10000000 does not exist", 2).await;
    t.type_line("q");
    t.wait_count("[stepctl exit 0]", 1).await;
    let remembered = std::fs::read_to_string(&history).expect("the history file");
    assert!(remembered.contains("help"), "{remembered}");

    let t = Tmux::start(&stepctl_command(
        &daemon.addr,
        &history,
        &["inspect", &session, "nested"],
    ));
    t.wait_count("'a' = [1, 2, {'b': [...]}]  #0", 1).await;
    t.type_line("0");
    t.wait_count("── ['a'] (list)", 1).await;
    t.type_line("print");
    t.wait_count("[1, 2, {'b': [3, 4, {'c': 'deep'}]}]", 1)
        .await;
    t.type_line("2");
    t.type_line("view");
    t.wait_count("--- Fields:", 1).await;
    t.type_line("quit");
    t.wait_count("[stepctl exit 0]", 1).await;
    daemon.stop().await;
}

#[tokio::test]
async fn stepctl_inspect_json_for_scripts() {
    let (daemon, _sub, session, _) = biglist(&[]).await;
    let run = |args: &[&str]| {
        std::process::Command::new(stepd_e2e::stepctl_bin())
            .env("STEPD_ADDR", &daemon.addr)
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run stepctl")
    };
    let out = run(&[
        "--json", "inspect", &session, "nested", "--do", "0", "--do", "push 2", "--do", "a",
    ]);
    assert!(out.status.success(), "{out:?}");
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert_eq!(lines[0]["type"], "dict");
    assert_eq!(lines[2]["path"], "['a'][2]");
    assert_eq!(lines[3]["analysed"], "1");
    let bad = run(&["--json", "inspect", &session, "nested", "--do", "push 9"]);
    assert_eq!(bad.status.code(), Some(24), "INVALID_ARGUMENT: {bad:?}");
    let err: serde_json::Value = serde_json::from_slice(&bad.stderr).unwrap();
    assert_eq!(err["error"]["reason"], "INVALID_ARGUMENT");
    daemon.stop().await;
}
