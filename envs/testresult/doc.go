// Package testresult turns test-runner output into per-test-case results:
// JUnit XML (pytest --junitxml, go-junit-report, JUnit itself), CTRF JSON
// (pytest --ctrf, as Harbor tasks write it) and the summary lines of
// pytest -rA. Results feed the reward, so a parser never
// invents a pass: text it does not understand yields no cases, and the
// caller falls back to the command's exit code.
package testresult
