// Package rollout runs whole episodes with a policy and records them: the
// engine behind `gymserver rollout`.
//
// A Runner takes a set of gym.Env (local Docker environments or remote ones
// through the Go client), the loaded config, a policy factory (one policy
// per task) and the plugins, and runs episodes in parallel, at most
// rollout_config.max_parallel_rollouts at a time.
//
// An environment's tasks come from gym.TaskLister when it has it, else
// from its spec. The run covers those that rollout_config.task_filter
// matches as "ENV/TASK", sampled down to rollout_config.tasks_per_env
// (reproducibly, by sample_seed): see SelectTasks and PlanEnv. Each
// environment runs episode_control_config.EpisodesFor(tasks) episodes,
// spread round-robin over its tasks, so every task's n-th episode starts
// before any task's (n+1)-th; a one-task environment runs max_episodes,
// as seed configs always did. Environments are interleaved the same way:
// each environment's n-th episode starts before any environment's
// (n+1)-th. Episode control is decided when a slot frees up, from the
// episodes finished so far, per task, because a dataset's user stops a
// task once it is solved, not its neighbours:
//
//   - stop_on_success stops a task after its first success;
//   - min_success_rate stops a task once at least two of its episodes
//     finished and its success rate reached the rate;
//   - an environment stops once all its tasks stopped;
//   - safety_limit caps the episodes started by the whole run;
//   - a plugin answering stop (performance_based_rollout, or an external
//     plugin) stops an environment, or the run;
//   - a plugin answering more_episodes adds episodes to an environment's
//     schedule (after the planned ones, continuing the round-robin over its
//     tasks), and parallel changes how many run at once from then on.
//
// A pre_episode plugin may change the episode before it starts: its
// environment variables go to Reset as the environment_variables option;
// its prompt replaces the first user message of the transcript; its
// max_actions, global_timeout and command_timeout lower the limits the
// runner enforces (calls past the lowered action limit are not sent, and
// execute_command calls get the lower timeout), never raise the
// environment's. The trajectory records what was applied
// (episode_changes). A post_test plugin's score becomes the episode's
// final_score, which the statistics use; test_score keeps the tests' own.
//
// Success rates count scored episodes only: an episode masked as an
// infrastructure failure (sandbox_error, verifier_error, policy_error) is
// never counted as a silent 0.
//
// The agent loop of one episode: Reset; the transcript starts with the
// Reset's messages (system and user); the policy answers a turn; the turn's
// tool calls go through the pre_action plugins, the allowed ones are stepped
// together, and the transcript gets one tool message per call, in call
// order, each answering its call's id. A call a plugin blocks is not sent to
// the environment at all: the runner writes the tool message itself ("Blocked
// by <plugin>: <reason>"), marks the step blocked in the trajectory, and
// counts it as an agent_error action towards the action limit. A text turn
// (gym.Turn.Parser set) is read with toolparse.Calls, as the environment
// reads it; when no plugin blocked or replaced a call it is stepped as text,
// and the environment parses it and names its calls. A turn without tool
// calls is answered with a user message asking for a tool call (or the
// policy's parse error); a text turn whose calls cannot be read is stepped,
// and the environment's explanation becomes that message. After
// MaxNoActionTurns such turns in a row the episode is evaluated and ends as
// no_action.
//
// Time: the environment enforces the episode's global timeout itself,
// truncating the step that overruns and evaluating. The runner bounds the
// policy's calls by the same deadline (then evaluates and ends the episode
// as timeout), and bounds everything, evaluation included, by a hard
// deadline a little later (global timeout + the tests' time + a grace
// period), so the environment's own truncation wins and a hung environment
// still cannot hold the run: at the hard deadline the episode ends as a
// masked sandbox_error.
//
// Budget: with Options.Budget set (llm_config.max_tokens_per_episode,
// max_cost_per_episode), the runner checks the episode's usage before each
// policy call; once a cap is reached it evaluates the episode as it stands,
// which ends as truncated with termination reason budget.
//
// A policy error (the API failed after its retries) ends the episode
// without evaluation: termination reason policy_error, error class
// policy_error, masked. Cancelling the context stops the run: no new
// episode starts, running ones are closed (their sandboxes removed) and not
// recorded, and what finished is written.
//
// Outputs: one trajectory (gym.Trajectory) per episode, named
// <env>-<episode>.json in the trajectory directory, written atomically as
// the episode finishes; the results file (a JSON array of Record, or of
// SeedRecord, the whole episode in the seed's shape, with ResultsSeed;
// rewritten every save_trajectory_interval episodes and at the end) and the
// stats file beside it (Stats, which also carries the seed's aggregate
// names). Timestamps are written as gym.Time: microseconds and a numeric
// offset, which Python's datetime.fromisoformat reads on every version. With state_persistence_enabled an episode whose
// trajectory file exists is not run again: its trajectory is read back and
// counted, so an interrupted run resumes where it stopped.
package rollout
