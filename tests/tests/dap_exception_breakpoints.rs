//! Exception breakpoints keep every field they are given, on a real
//! debugpy: a condition (evaluated in the raising frame), a hit condition,
//! a LOG action, and two breakpoints on different filters, each judged only
//! for the exceptions its own filter caught.

use stepd_e2e::{Daemon, Subscription, dap, fixture, watched};
use stepd_proto::v1::{
    BreakpointAction, BreakpointSpec, EndReason, ExceptionFilters, Pause, PauseReason,
    breakpoint_spec::Location,
};

fn on_raise(filter: &str) -> BreakpointSpec {
    BreakpointSpec {
        location: Some(Location::Exception(ExceptionFilters {
            filter_ids: vec![filter.into()],
        })),
        ..Default::default()
    }
}

/// Launches python/raises.py (ValueError for 1, 2, 3, each caught) and
/// collects the pauses it makes, answering each with CONTINUE, until it ends.
async fn pauses_until_the_end(daemon: &Daemon, sub: &mut Subscription) -> (Vec<Pause>, String) {
    let program = fixture("python/raises.py");
    let session = dap::launch(daemon, "debugpy", program.to_str().unwrap(), &[])
        .await
        .session
        .unwrap();
    let (pauses, end, output) = dap::continue_to_the_end(daemon, sub, &session.id).await;
    assert_eq!(end.reason, EndReason::Exited as i32, "{end:?}");
    (pauses, output)
}

fn values(pauses: &[Pause]) -> Vec<String> {
    pauses
        .iter()
        .map(|p| dap::local(p, "value").to_owned())
        .collect()
}

#[tokio::test]
async fn an_exception_breakpoint_condition_is_honoured() {
    let (daemon, mut sub) = watched().await;
    let bp = dap::add_breakpoint(
        &daemon,
        BreakpointSpec {
            condition: "value == 2".into(),
            ..on_raise("raised")
        },
    )
    .await;
    let (pauses, output) = pauses_until_the_end(&daemon, &mut sub).await;
    // Before, the condition was stored and ignored: three pauses.
    assert_eq!(values(&pauses), ["2"], "{pauses:#?}");
    assert_eq!(pauses[0].reason, PauseReason::Exception as i32);
    assert!(
        pauses[0].caught_msg.contains("bad value 2"),
        "{:?}",
        pauses[0]
    );
    assert_eq!(pauses[0].breakpoint_ids, [bp]);
    assert!(output.contains("done"), "{output}");
    daemon.stop().await;
}

#[tokio::test]
async fn an_exception_breakpoint_hit_condition_and_log_action_are_honoured() {
    let (daemon, mut sub) = watched().await;
    dap::add_breakpoint(
        &daemon,
        BreakpointSpec {
            hit_condition: ">=2".into(),
            ..on_raise("raised")
        },
    )
    .await;
    let (pauses, _) = pauses_until_the_end(&daemon, &mut sub).await;
    assert_eq!(values(&pauses), ["2", "3"], "{pauses:#?}");
    daemon.stop().await;

    let (daemon, mut sub) = watched().await;
    dap::add_breakpoint(
        &daemon,
        BreakpointSpec {
            action: BreakpointAction::Log.into(),
            log_message: "raised with {value}".into(),
            ..on_raise("raised")
        },
    )
    .await;
    let (pauses, output) = pauses_until_the_end(&daemon, &mut sub).await;
    assert!(pauses.is_empty(), "a log point does not stop: {pauses:#?}");
    for n in 1..=3 {
        assert!(output.contains(&format!("raised with {n}")), "{output}");
    }
    daemon.stop().await;
}

#[tokio::test]
async fn each_exception_breakpoint_is_judged_for_its_own_filter() {
    let (daemon, mut sub) = watched().await;
    // `uncaught` never fires (every ValueError is caught); its hit count must
    // stay 0, and `raised` with its condition alone decides.
    let raised = dap::add_breakpoint(
        &daemon,
        BreakpointSpec {
            condition: "value == 3".into(),
            ..on_raise("raised")
        },
    )
    .await;
    let uncaught = dap::add_breakpoint(&daemon, on_raise("uncaught")).await;
    let (pauses, _) = pauses_until_the_end(&daemon, &mut sub).await;
    assert_eq!(values(&pauses), ["3"], "{pauses:#?}");
    assert_eq!(pauses[0].breakpoint_ids, std::slice::from_ref(&raised));
    let listed = stepd_proto::v1::breakpoint_service_client::BreakpointServiceClient::new(
        daemon.channel().await,
    )
    .list_breakpoints(stepd_proto::v1::ListBreakpointsRequest::default())
    .await
    .unwrap()
    .into_inner()
    .breakpoints;
    let hits = |id: &str| listed.iter().find(|b| b.id == id).unwrap().hit_count;
    assert_eq!(hits(&uncaught), 0);
    // Hits are counted when the condition holds, as DAP counts them.
    assert_eq!(hits(&raised), 1);
    daemon.stop().await;
}
