// Package harbor reads Harbor task directories, the task format of
// Terminal-Bench 2 (github.com/laude-institute/harbor), and the reward
// files their verifiers write. It only reads: building images, running
// the agent and running the tests belong to the callers.
//
// A task directory holds:
//
//	task.toml              configuration (Config)
//	instruction.md         the task prompt; leading canary comment lines are dropped
//	environment/Dockerfile the image, built with environment/ as context,
//	                       unless [environment] docker_image names one
//	tests/test.sh          the verifier, with its test files; uploaded to /tests
//	                       only after the agent finishes, run as bash /tests/test.sh
//	solution/solve.sh      the reference solution (optional); uploaded to
//	                       /solution, run as bash /solution/solve.sh
//
// The verifier writes /logs/verifier/reward.txt (one number) or
// /logs/verifier/reward.json (an object of named numeric metrics);
// ParseReward reads them with Harbor's precedence. Its stdout goes to
// /logs/verifier/test-stdout.txt.
//
// task.toml is decoded strictly: an unknown key is an error naming the
// key and the file (Harbor itself ignores unknown keys). Supported, with
// Harbor's defaults: [task] and [metadata] (recorded), [verifier]
// timeout_sec and env, [agent] timeout_sec, [environment]
// build_timeout_sec, docker_image, cpus, memory_mb, storage_mb (and the
// deprecated memory and storage), allow_internet, network_mode "public"
// and "no-network", env, and [solution] env.
//
// Networking differs from Harbor on purpose: Harbor's default is
// allow_internet = true, ours is no network at all. A task gets the
// network only when it sets allow_internet = true or network_mode =
// "public" (Config.Network).
//
// Not supported; Load reports each as a warning on the task, or an error
// where running the task without it cannot work:
//   - multi-container tasks (environment/docker-compose.yaml): an error;
//   - GPUs (gpus, gpu_types);
//   - MCP servers (mcp_servers) and skills (skills_dir);
//   - health checks (healthcheck);
//   - allowlist networking (network_mode "allowlist", allowed_hosts): the
//     sandbox gets no network;
//   - per-phase network policies ([agent] and [verifier] network_mode);
//   - [agent] user and [verifier] user, including the agent as root: the
//     agent and the tests run as the sandbox's non-root user.
package harbor
