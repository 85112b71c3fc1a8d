//! Shell completion: clap's script for the shell, and on top of it what a
//! static script cannot know, the live sessions. Where a command takes a
//! session (its SESSION argument, `--session`), the script asks
//! `stepctl complete-sessions`, which prints the live sessions' ids and names
//! and never starts a daemon.

use stepd_proto::v1::SessionState;

use crate::{
    cmd::select::all_sessions,
    connect::{self, Channel},
    exit::Failure,
};

/// The hidden subcommand the scripts call for session candidates.
pub const SESSIONS_HELPER: &str = "complete-sessions";

/// `stepctl complete-sessions`: one candidate a line, ids then names.
pub async fn sessions(options: &connect::Options) -> Result<(), Failure> {
    let options = connect::Options {
        start: false,
        ..options.clone()
    };
    let channel: Channel = connect::channel(&options).await?;
    let live: Vec<_> = all_sessions(channel)
        .await?
        .into_iter()
        .filter(|s| s.state != SessionState::Ended as i32)
        .collect();
    for session in &live {
        println!("{}", session.id);
    }
    for session in &live {
        if !session.name.is_empty() && !session.name.contains(char::is_whitespace) {
            println!("{}", session.name);
        }
    }
    Ok(())
}

/// The subcommands that take a session as a positional argument, with its
/// index among their positionals, and the options (of any subcommand) that
/// take a value, from the definitions.
fn session_commands(command: &clap::Command) -> (Vec<(String, usize)>, Vec<String>) {
    let mut takes_session = Vec::new();
    let mut value_options = Vec::new();
    let mut note_options = |cmd: &clap::Command| {
        for arg in cmd.get_arguments() {
            if arg.get_action().takes_values()
                && let Some(long) = arg.get_long()
            {
                value_options.push(format!("--{long}"));
            }
        }
    };
    note_options(command);
    for sub in command.get_subcommands() {
        note_options(sub);
        if let Some(index) = sub
            .get_positionals()
            .position(|a| matches!(a.get_id().as_str(), "session" | "rest"))
        {
            takes_session.push((sub.get_name().to_owned(), index));
        }
    }
    value_options.sort();
    value_options.dedup();
    (takes_session, value_options)
}

/// The bash function that completes sessions and hands the rest to clap's.
fn bash(command: &clap::Command) -> String {
    let (subs, values) = session_commands(command);
    format!(
        r#"
# Live sessions where a session goes; clap's completion elsewhere.
_stepctl_live() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    local sub="" n=0 skip=0 i w
    for (( i=1; i<COMP_CWORD; i++ )); do
        w="${{COMP_WORDS[i]}}"
        if (( skip )); then skip=0; continue; fi
        case "$w" in
            --*=*) ;;
            -*) [[ " {values} " == *" $w "* ]] && skip=1 ;;
            *) if [[ -z "$sub" ]]; then sub="$w"; else n=$((n+1)); fi ;;
        esac
    done
    local at=-1
    case "$sub" in
{cases}
    esac
    if [[ "$prev" == "--session" ]] || {{ (( ! skip )) && [[ "$cur" != -* && $n -eq $at ]]; }}; then
        COMPREPLY=( $(compgen -W "$(stepctl {helper} 2>/dev/null)" -- "$cur") )
        return 0
    fi
    _stepctl "$@"
}}
complete -F _stepctl_live -o nosort -o bashdefault -o default stepctl
"#,
        values = values.join(" "),
        cases = subs
            .iter()
            .map(|(sub, at)| format!("        {sub}) at={at} ;;"))
            .collect::<Vec<_>>()
            .join("\n"),
        helper = SESSIONS_HELPER,
    )
}

/// The fish lines that add sessions to clap's.
fn fish(command: &clap::Command) -> String {
    let (subs, _) = session_commands(command);
    let mut out = String::from("\n# Live sessions where a session goes.\n");
    for (sub, _) in subs {
        out.push_str(&format!(
            "complete -c stepctl -n \"__fish_stepctl_using_subcommand {sub}\" -a \"(stepctl {SESSIONS_HELPER} 2>/dev/null)\"\n"
        ));
    }
    out
}

/// `stepctl completion SHELL`: the script on stdout.
pub fn script(shell: clap_complete::Shell, mut command: clap::Command) {
    clap_complete::generate(shell, &mut command, "stepctl", &mut std::io::stdout());
    command.build();
    match shell {
        clap_complete::Shell::Bash => print!("{}", bash(&command)),
        clap_complete::Shell::Fish => print!("{}", fish(&command)),
        _ => {}
    }
}
