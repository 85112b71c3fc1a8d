package stepd

import (
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	stepdv1 "github.com/stepd-dev/stepd/clients/go/gen/stepd/v1"
)

// Debug commands, the answers to a pause. A pause's input_type lists the
// kinds valid for it.

// CmdNext steps over (DAP) or pauses at the very next hit (probe).
func CmdNext() *stepdv1.DebugCommand {
	return &stepdv1.DebugCommand{Command: &stepdv1.DebugCommand_Next{Next: &stepdv1.NextCommand{}}}
}

// CmdStepIn steps in (DAP) or pauses at the next hit nested deeper (probe).
func CmdStepIn() *stepdv1.DebugCommand {
	return &stepdv1.DebugCommand{Command: &stepdv1.DebugCommand_StepIn{StepIn: &stepdv1.StepInCommand{}}}
}

// CmdStepOut steps out; force also skips breakpoints on the way.
func CmdStepOut(force bool) *stepdv1.DebugCommand {
	return &stepdv1.DebugCommand{Command: &stepdv1.DebugCommand_StepOut{StepOut: &stepdv1.StepOutCommand{Force: force}}}
}

// CmdHere runs to a source line (DAP).
func CmdHere(path string, line uint32, force bool) *stepdv1.DebugCommand {
	return &stepdv1.DebugCommand{Command: &stepdv1.DebugCommand_Here{Here: &stepdv1.HereCommand{Path: path, Line: line, Force: force}}}
}

// CmdHereCoor runs until the hit with this coordinate (probe).
func CmdHereCoor(coor []int32, force bool) *stepdv1.DebugCommand {
	return &stepdv1.DebugCommand{Command: &stepdv1.DebugCommand_Here{Here: &stepdv1.HereCommand{Coor: coor, Force: force}}}
}

// CmdContinue goes on to the next breakpoint.
func CmdContinue() *stepdv1.DebugCommand {
	return &stepdv1.DebugCommand{Command: &stepdv1.DebugCommand_Resume{Resume: &stepdv1.ContinueCommand{}}}
}

// CmdContinueScope goes on, ignoring breakpoints until the current frame or scope ends.
func CmdContinueScope() *stepdv1.DebugCommand {
	return &stepdv1.DebugCommand{Command: &stepdv1.DebugCommand_ContinueScope{ContinueScope: &stepdv1.ContinueScopeCommand{}}}
}

// CmdContinueAll goes on with every breakpoint off for the session until the next Pause request.
func CmdContinueAll() *stepdv1.DebugCommand {
	return &stepdv1.DebugCommand{Command: &stepdv1.DebugCommand_ContinueAll{ContinueAll: &stepdv1.ContinueAllCommand{}}}
}

// CmdTrace keeps stepping, emitting a trace event per step; maxSteps 0 = no limit.
func CmdTrace(maxSteps uint32) *stepdv1.DebugCommand {
	return &stepdv1.DebugCommand{Command: &stepdv1.DebugCommand_Trace{Trace: &stepdv1.TraceCommand{MaxSteps: maxSteps}}}
}

// CmdEval evaluates code in the paused frame; the pause is re-sent with the result.
func CmdEval(code string) *stepdv1.DebugCommand {
	return &stepdv1.DebugCommand{Command: &stepdv1.DebugCommand_Eval{Eval: &stepdv1.EvalCommand{Code: code}}}
}

// CmdInjectCode replaces the paused value with the result of code and goes on.
func CmdInjectCode(code string) *stepdv1.DebugCommand {
	return &stepdv1.DebugCommand{Command: &stepdv1.DebugCommand_Inject{Inject: &stepdv1.InjectCommand{
		Replacement: &stepdv1.InjectCommand_Code{Code: code},
	}}}
}

// CmdInjectValue replaces the paused (probe) value with value and goes on.
func CmdInjectValue(value *structpb.Value) *stepdv1.DebugCommand {
	return &stepdv1.DebugCommand{Command: &stepdv1.DebugCommand_Inject{Inject: &stepdv1.InjectCommand{
		Replacement: &stepdv1.InjectCommand_Value{Value: value},
	}}}
}

// CmdInject replaces the paused (probe) value with value, any Go value that
// encoding/json marshals (a struct with its json tags, a map, a slice, a
// number, a string, nil; a json.RawMessage is taken as JSON text; a
// *structpb.Value as is), and goes on. Numbers travel as JSON numbers
// (float64): integers beyond 2^53 lose precision.
func CmdInject(value any) (*stepdv1.DebugCommand, error) {
	v, err := jsonValue(value)
	if err != nil {
		return nil, err
	}
	return CmdInjectValue(v), nil
}

// jsonValue is value as a google.protobuf.Value, through its JSON encoding.
func jsonValue(value any) (*structpb.Value, error) {
	if v, ok := value.(*structpb.Value); ok {
		return v, nil
	}
	text, err := json.Marshal(value)
	if err != nil {
		return nil, fmt.Errorf("stepd: INJECT value: %w", err)
	}
	v := &structpb.Value{}
	if err := protojson.Unmarshal(text, v); err != nil {
		return nil, fmt.Errorf("stepd: INJECT value: %w", err)
	}
	return v, nil
}

// CmdSkip does not perform the held call (probe).
func CmdSkip() *stepdv1.DebugCommand {
	return &stepdv1.DebugCommand{Command: &stepdv1.DebugCommand_Skip{Skip: &stepdv1.SkipCommand{}}}
}

// CmdInspect opens the paused value in an inspector.
func CmdInspect() *stepdv1.DebugCommand {
	return &stepdv1.DebugCommand{Command: &stepdv1.DebugCommand_Inspect{Inspect: &stepdv1.InspectCommand{}}}
}

// CmdInspectPrompt evaluates code (or asks for an expression when empty) and inspects the result.
func CmdInspectPrompt(code string) *stepdv1.DebugCommand {
	return &stepdv1.DebugCommand{Command: &stepdv1.DebugCommand_InspectPrompt{InspectPrompt: &stepdv1.InspectPromptCommand{Code: code}}}
}

// CmdLocals opens the locals in an inspector.
func CmdLocals() *stepdv1.DebugCommand {
	return &stepdv1.DebugCommand{Command: &stepdv1.DebugCommand_Locals{Locals: &stepdv1.LocalsCommand{}}}
}

// CmdStacktrace emits a stack event and re-prompts.
func CmdStacktrace() *stepdv1.DebugCommand {
	return &stepdv1.DebugCommand{Command: &stepdv1.DebugCommand_Stacktrace{Stacktrace: &stepdv1.StacktraceCommand{}}}
}

// CmdQuit terminates the debuggee (DAP) or makes the probe stop the program.
func CmdQuit() *stepdv1.DebugCommand {
	return &stepdv1.DebugCommand{Command: &stepdv1.DebugCommand_Quit{Quit: &stepdv1.QuitCommand{}}}
}

// CmdExpression answers an EXPRESSION prompt.
func CmdExpression(code string) *stepdv1.DebugCommand {
	return &stepdv1.DebugCommand{Command: &stepdv1.DebugCommand_Expression{Expression: &stepdv1.ExpressionCommand{Code: code}}}
}

// CmdJump moves the paused thread to line of its file without running the
// lines between (DAP goto, where the adapter has it); it stops there again.
func CmdJump(line uint32) *stepdv1.DebugCommand {
	return &stepdv1.DebugCommand{Command: &stepdv1.DebugCommand_Jump{Jump: &stepdv1.JumpCommand{Line: line}}}
}
