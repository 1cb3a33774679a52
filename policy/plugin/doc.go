// Package plugin runs the rollout runner's plugins: named, compiled-in
// extensions (and external programs) called at fixed points of a run.
//
// A plugin sees one Event per hook and answers a Response. The hooks, in the
// order a run fires them:
//
//	pre_rollout   once, before the first episode; Event.Plan is the run's plan
//	pre_episode   before an episode's sandbox is reset
//	pre_action    before each tool call runs; may block it or replace it
//	post_action   after each tool call, with its output and diagnostics
//	pre_test      before the step or Evaluate that will run the hidden tests
//	post_test     once the evaluation is known, with the per-test results
//	post_episode  after the episode, with its whole trajectory
//	post_rollout  once, after the last episode, with the run's statistics
//
// pre_test fires before the runner knowingly asks for the evaluation: before
// a step whose calls include mark_done or reach the action limit, and before
// the runner ends an episode itself (no_action, timeout). When the
// environment ends an episode on its own during a step (its global timeout,
// a sandbox failure) the tests have already run when the runner learns of
// it; pre_test then fires after the fact with Event.AfterEvaluation set.
// pre_test can only observe: it sees the episode so far (Event.Messages),
// never the hidden tests. post_test sees the Evaluation.
//
// A Response may block a call (pre_action), replace it (pre_action; the
// call's id is kept), attach data to the episode's trajectory (saved under
// "plugins" by plugin name) or to the run's statistics (rollout hooks),
// leave suggestions (appended to the data's "suggestions"), and stop the
// run from scheduling more episodes: for the event's environment, or for
// the whole run when the event has no environment. It may also change the
// episode's reward (post_test: score; the trajectory keeps the tests' own
// beside it), change the episode about to start (pre_episode: its prompt,
// sandbox environment variables, and lower limits), and schedule more
// episodes or change the parallelism (pre_rollout, pre_episode,
// post_episode). Each field is refused at the hooks where it means
// nothing (checkResponse); such an answer is a failure.
//
// Plugins are loaded from config.Plugin entries by Load, which validates
// every entry at once. An entry with a command is an external plugin (see
// External); a dotted name (package.module) is a Real Work plugin module
// run by the Python adapter (see Module), which Load runs once to import
// the module and list its classes, so that `rollout --dry-run` reports a
// module that does not import; any other entry must name a built-in:
// safety_filter, performance_based_rollout or trajectory_analysis, or one
// of Real Work's class names for them (SeedAliases: SafetyFilterPlugin,
// PerformanceBasedRolloutPlugin, TrajectoryAnalysisPlugin), after which the
// plugin goes by the built-in's name. Nothing else starts before the run;
// Set.Close removes what module plugins keep between calls.
//
// A plugin that fails (an error, a timeout, a bad answer) is logged,
// counted in Stats and recorded in the trajectory; the run goes on as if it
// had answered nothing, so a failing filter fails open.
package plugin
