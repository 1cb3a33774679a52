// Package view renders the outputs of a rollout (the results file, its
// stats file and the trajectories they name) as one self-contained HTML
// report: stats tables, plots as inline SVG, a filterable list of episodes
// and each episode's transcript and evaluation. The report needs no network
// to be read: its CSS and JavaScript are inline. Every piece of text from
// the files is escaped by html/template, since transcripts hold model and
// agent output.
package view
