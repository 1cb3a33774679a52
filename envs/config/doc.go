// Package config loads gymserver's configuration files: the Real Work seed's
// JSON format (environments[], rollout_config, episode_control_config,
// timeout_config, template_prompt, plugins) plus gymserver's additive fields
// (hidden_tests, reference_solution, reward, resources, network,
// max_actions, llm_config).
//
// Decoding is strict: an unknown key or a value of the wrong type is an error
// naming its JSON path, and all problems are reported together. Relative
// paths resolve against the config file's directory. Loading starts nothing.
package config
