package envs

import (
	"slices"
	"strings"
	"testing"

	"github.com/gymserver/gymserver/envs/sandbox"
)

// TestTestImports checks the module names read off the hidden tests'
// import lines: every form of import, in order, each once, only from
// Python files, no relative imports and nothing that is not a name.
func TestTestImports(t *testing.T) {
	files := []sandbox.File{
		{Path: "/w/tests/test_a.py", Data: []byte(`"""Tests."""
import json
import os.path, urllib.request as ur  # comment: import nothing
from http import client, server as srv
from email.mime.text import MIMEText
from . import helpers
from .helpers import x
import json
    import asyncio; import sqlite3
def f():
    from unittest import mock
from concurrent.futures import (ThreadPoolExecutor,
    as_completed)
import 3rd, bad-name
x = "import"
from ` + strings.Repeat("p", 120) + ` import too_long_together
`)},
		{Path: "/w/tests/conftest.py", Data: []byte("import pytest\nfrom decimal import *\n")},
		{Path: "/w/tests/data.txt", Data: []byte("import tarfile\n")},
	}
	want := []string{"json", "os.path", "urllib.request", "http", "http.client", "http.server", "email.mime.text",
		"email.mime.text.MIMEText", "asyncio", "unittest", "unittest.mock", "concurrent.futures",
		"concurrent.futures.ThreadPoolExecutor", strings.Repeat("p", 120), "pytest", "decimal"}
	if got := testImports(files); !slices.Equal(got, want) {
		t.Errorf("testImports:\n got %v\nwant %v", got, want)
	}

	var many strings.Builder
	for i := range 300 {
		many.WriteString("import m" + strings.Repeat("x", i%7) + "_" + string(rune('a'+i%26)) + string(rune('a'+i/26)) + "\n")
	}
	if got := testImports([]sandbox.File{{Path: "t.py", Data: []byte(many.String())}}); len(got) != 256 {
		t.Errorf("300 imports gave %d names, want the bound, 256", len(got))
	}
}
