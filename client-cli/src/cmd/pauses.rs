//! `stepctl pauses` and `stepctl input`: the pending pauses, and answering
//! one with a command word (`next`, `until 12`, `jump 12`, `inject 'x = 1'`…).

use crate::connect::client;
use std::time::Duration;

use clap::Args;
use stepd_proto::v1::{
    ContinueAllCommand, ContinueCommand, ContinueScopeCommand, DebugCommand, DebugInput,
    EvalCommand, EventChannel, ExpressionCommand, HereCommand, InjectCommand, InspectCommand,
    InspectPromptCommand, JumpCommand, ListPausesRequest, LocalsCommand, NextCommand, Pause,
    QuitCommand, SendDebugInputRequest, SkipCommand, StacktraceCommand, StepInCommand,
    StepOutCommand, SubscribeRequest, SubscribeResponse, TraceCommand, Watch,
    debug_command::Command, event::Payload, event_service_client::EventServiceClient,
    inject_command::Replacement, subscribe_request::Message,
};
use tokio::sync::mpsc;
use tokio_stream::{StreamExt, wrappers::ReceiverStream};
use tonic::{Code, Status};

use crate::connect::Channel;
use tonic_types::{ErrorDetails, StatusExt};

use crate::{
    exit::Failure,
    render::{
        self,
        pauses::{command_word, commands_text, display, pause_details, reason_text, where_text},
        print_json,
    },
};

use super::sessions::{CLIENT_NAME, absolute, sessions_client};

/// Arguments of `pauses`.
#[derive(Debug, Args)]
pub struct PausesArgs {
    /// Only this session's pauses.
    #[arg(long)]
    pub session: Option<String>,
}

/// Arguments of `input`.
#[derive(Debug, Args)]
pub struct InputArgs {
    /// The pause's key (see `stepctl pauses`).
    pub key: String,
    /// next, in, out, out! (forced), continue, continue-scope, continue-all,
    /// here FILE:LINE (or LINE, or @COOR for probes), here! FILE:LINE (forced),
    /// until LINE (the first line at or after it in the frame), jump LINE, trace [MAX_STEPS],
    /// eval [CODE] (without CODE: the pause asks for an expression), inject
    /// 'NAME = EXPR', skip, inspect, inspect-prompt [CODE], locals, stacktrace,
    /// quit, expression CODE.
    pub command: String,
    /// The command's argument (one word: quote code with spaces).
    #[arg(allow_hyphen_values = true)]
    pub arg: Option<String>,
    /// With out/here: skip breakpoints on the way.
    #[arg(long)]
    pub force: bool,
}

/// `stepctl pauses`.
pub async fn pauses(channel: Channel, args: PausesArgs, json: bool) -> Result<(), Failure> {
    let r = sessions_client(channel)
        .list_pauses(ListPausesRequest {
            session_id: args.session.unwrap_or_default(),
        })
        .await?
        .into_inner();
    if json {
        print_json(&r);
    } else if r.pauses.is_empty() {
        println!("no pauses");
    } else {
        let rows: Vec<Vec<String>> = r
            .pauses
            .iter()
            .map(|p| {
                let place = match (&p.point, &p.location) {
                    (Some(point), _) => format!("{} {}", point.kind, point.name),
                    (None, Some(location)) => where_text(location),
                    (None, None) => "-".into(),
                };
                vec![
                    p.key.clone(),
                    p.session_id.clone(),
                    p.thread_id.to_string(),
                    reason_text(p.reason),
                    place,
                    commands_text(&p.input_type),
                ]
            })
            .collect();
        println!(
            "{}",
            render::table(
                &["KEY", "SESSION", "THREAD", "REASON", "WHERE", "COMMANDS"],
                &rows
            )
        );
    }
    Ok(())
}

/// Parses `here`'s FILE:LINE (or LINE alone: the paused file), or a probe
/// coordinate `@0,2` (the point's index in each open scope).
fn parse_here(text: &str, force: bool) -> Result<HereCommand, Failure> {
    let usage = || {
        Failure::Usage(format!(
            "here takes FILE:LINE, LINE or a probe coordinate like @0,2, not {text:?}"
        ))
    };
    if let Some(coor) = text.strip_prefix('@') {
        let coor = coor
            .split(',')
            .map(|n| n.trim().parse::<i32>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| usage())?;
        return Ok(HereCommand {
            coor,
            path: String::new(),
            line: 0,
            force,
            within_frame: false,
        });
    }
    let (path, line) = match text.rsplit_once(':') {
        Some((path, line)) => (absolute(path), line),
        None => (String::new(), text),
    };
    let line: u32 = line.parse().map_err(|_| usage())?;
    Ok(HereCommand {
        coor: Vec::new(),
        path,
        line,
        force,
        within_frame: false,
    })
}

/// Builds the typed command of `input KEY COMMAND [ARG]`. `out!` and `here!`
/// are `out` and `here` with `force`.
pub fn debug_command(word: &str, arg: Option<String>, force: bool) -> Result<Command, Failure> {
    let (word, force) = match word.strip_suffix('!') {
        Some(plain @ ("out" | "here")) => (plain, true),
        _ => (word, force),
    };
    let needs = |what: &str| Failure::Usage(format!("{word} needs {what}"));
    let takes_arg = matches!(
        word,
        "here" | "until" | "jump" | "trace" | "eval" | "inject" | "inspect-prompt" | "expression"
    );
    if !takes_arg && arg.is_some() {
        return Err(Failure::Usage(format!("{word} takes no argument")));
    }
    if force && !matches!(word, "out" | "here") {
        return Err(Failure::Usage(
            "--force applies to out and here only".into(),
        ));
    }
    Ok(match word {
        "next" => Command::Next(NextCommand {}),
        "in" => Command::StepIn(StepInCommand {}),
        "out" => Command::StepOut(StepOutCommand { force }),
        "continue" => Command::Resume(ContinueCommand {}),
        "continue-scope" => Command::ContinueScope(ContinueScopeCommand {}),
        "continue-all" => Command::ContinueAll(ContinueAllCommand {}),
        "here" => Command::Here(parse_here(&arg.ok_or_else(|| needs("FILE:LINE"))?, force)?),
        "jump" => {
            let line = arg.ok_or_else(|| needs("LINE"))?;
            Command::Jump(JumpCommand {
                line: line
                    .parse()
                    .map_err(|_| Failure::Usage(format!("jump takes a line, not {line:?}")))?,
                path: String::new(),
            })
        }
        "until" => {
            let line = arg.ok_or_else(|| needs("LINE"))?;
            Command::Here(HereCommand {
                line: line
                    .parse()
                    .map_err(|_| Failure::Usage(format!("until takes a line, not {line:?}")))?,
                within_frame: true,
                ..Default::default()
            })
        }
        "trace" => Command::Trace(TraceCommand {
            max_steps: match arg {
                Some(n) => n
                    .parse()
                    .map_err(|_| Failure::Usage(format!("trace takes a step count, not {n:?}")))?,
                None => 0,
            },
        }),
        "eval" => Command::Eval(EvalCommand {
            code: arg.unwrap_or_default(),
        }),
        "inject" => Command::Inject(InjectCommand {
            replacement: Some(Replacement::Code(arg.ok_or_else(|| needs("CODE"))?)),
        }),
        "skip" => Command::Skip(SkipCommand {}),
        "inspect" => Command::Inspect(InspectCommand {}),
        "inspect-prompt" => Command::InspectPrompt(InspectPromptCommand {
            code: arg.unwrap_or_default(),
        }),
        "locals" => Command::Locals(LocalsCommand {}),
        "stacktrace" => Command::Stacktrace(StacktraceCommand {}),
        "quit" => Command::Quit(QuitCommand {}),
        "expression" => Command::Expression(ExpressionCommand {
            code: arg.ok_or_else(|| needs("CODE"))?,
        }),
        other => {
            return Err(Failure::Usage(format!(
                "unknown command {other:?}; one of next, in, out, continue, continue-scope, \
                 continue-all, here, until, jump, trace, eval, inject, skip, inspect, inspect-prompt, locals, \
                 stacktrace, quit, expression"
            )));
        }
    })
}

/// `stepctl input KEY COMMAND [ARG]`.
pub async fn input(channel: Channel, args: InputArgs, json: bool) -> Result<(), Failure> {
    let command = debug_command(&args.command, args.arg, args.force)?;
    // An EVAL or INJECT that fails keeps the pause as it was and reports the
    // error only as an `eval_error` event, so listen for the outcome before asking.
    let outcome = if matches!(
        command,
        Command::Eval(_) | Command::Expression(_) | Command::Inject(_)
    ) {
        Some(EvalOutcome::listen(channel.clone()).await?)
    } else {
        None
    };
    let r = sessions_client(channel)
        .send_debug_input(SendDebugInputRequest {
            input: Some(DebugInput {
                key: args.key.clone(),
                command: Some(DebugCommand {
                    command: Some(command),
                }),
                client_name: CLIENT_NAME.into(),
            }),
        })
        .await?
        .into_inner();
    if let (Some(outcome), Some(pause)) = (outcome, &r.pause) {
        outcome.check(pause).await?;
    }
    if json {
        print_json(&r);
        return Ok(());
    }
    println!(
        "{} accepted for pause {}",
        command_word(r.command),
        args.key
    );
    if let Some(pause) = &r.pause {
        if let Some(value) = &pause.debug_value {
            println!("= {}", display(value));
        }
        if pause.debug_value.is_none() || pause.inspect.is_some() {
            for line in pause_details(pause) {
                println!("{line}");
            }
        } else {
            println!(
                "pause {} stays (commands: {})",
                pause.key,
                commands_text(&pause.input_type)
            );
        }
    }
    Ok(())
}

/// A subscription to execution events, opened before an EVAL is sent, that
/// tells whether it succeeded (the pause is re-sent as `stopped`) or failed
/// (`eval_error`).
struct EvalOutcome {
    _tx: mpsc::Sender<SubscribeRequest>,
    events: tonic::Streaming<SubscribeResponse>,
}

/// How long to wait for the outcome event of an answered EVAL.
const OUTCOME_DEADLINE: Duration = Duration::from_secs(10);

impl EvalOutcome {
    /// Subscribes and waits for the snapshot, so no later event is missed.
    async fn listen(channel: Channel) -> Result<Self, Failure> {
        let (tx, rx) = mpsc::channel(4);
        tx.send(SubscribeRequest {
            message: Some(Message::Watch(Watch {
                channels: vec![EventChannel::Execution as i32],
                client_name: CLIENT_NAME.into(),
                ..Default::default()
            })),
        })
        .await
        .map_err(|_| Failure::Other(anyhow::anyhow!("subscription closed before it started")))?;
        let mut events = client!(EventServiceClient, channel)
            .subscribe(ReceiverStream::new(rx))
            .await?
            .into_inner();
        while let Some(response) = events.next().await {
            if matches!(
                response?.event.and_then(|e| e.payload),
                Some(Payload::Snapshot(_))
            ) {
                return Ok(Self { _tx: tx, events });
            }
        }
        Err(Failure::Other(anyhow::anyhow!(
            "the event stream ended before its snapshot"
        )))
    }

    /// ADAPTER_ERROR with the evaluator's message when the EVAL failed.
    async fn check(mut self, pause: &Pause) -> Result<(), Failure> {
        let wait = async {
            while let Some(response) = self.events.next().await {
                match response?.event.and_then(|e| e.payload) {
                    Some(Payload::EvalError(e)) if e.key == pause.key => {
                        return Err(Failure::Status(Status::with_error_details(
                            Code::FailedPrecondition,
                            format!("evaluation failed: {}", e.message.trim_end()),
                            ErrorDetails::with_error_info(
                                "ADAPTER_ERROR",
                                stepd_proto::ERROR_DOMAIN,
                                [("key".to_owned(), e.key)],
                            ),
                        )));
                    }
                    Some(Payload::Stopped(s))
                        if s.pause.as_ref().is_some_and(|p| {
                            p.key == pause.key && p.revision >= pause.revision
                        }) =>
                    {
                        return Ok(());
                    }
                    _ => {}
                }
            }
            Ok(())
        };
        // The answer itself is in hand; only its verdict could be late.
        tokio::time::timeout(OUTCOME_DEADLINE, wait)
            .await
            .unwrap_or(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stepd_proto::v1::CommandKind;

    #[test]
    fn commands_parse_with_their_arguments() {
        assert!(matches!(
            debug_command("eval", Some("x + 1".into()), false),
            Ok(Command::Eval(EvalCommand { code })) if code == "x + 1"
        ));
        assert!(matches!(
            debug_command("here", Some("/a.py:7".into()), true),
            Ok(Command::Here(HereCommand {
                line: 7,
                force: true,
                ..
            }))
        ));
        assert!(matches!(
            debug_command("here", Some("12".into()), false),
            Ok(Command::Here(HereCommand { line: 12, ref path, .. })) if path.is_empty()
        ));
        assert!(debug_command("next", Some("x".into()), false).is_err());
        assert!(debug_command("inject", None, false).is_err());
        assert!(debug_command("jump", None, false).is_err());
        assert!(matches!(
            debug_command("out!", None, false),
            Ok(Command::StepOut(StepOutCommand { force: true }))
        ));
        assert!(matches!(
            debug_command("here!", Some("9".into()), false),
            Ok(Command::Here(HereCommand {
                line: 9,
                force: true,
                ..
            }))
        ));
        assert!(debug_command("next!", None, false).is_err());
        assert_eq!(
            command_word(CommandKind::ContinueScope as i32),
            "continue-scope"
        );
    }
}
