package sandboxtest

// PidHolder is a Python program for the agent that leaves behind a process
// taking every pid the sandbox may have and keeping them (its children
// sleep) while it tries for more. It waits 2 s for that, then prints
// "pids exhausted: …" when a fork fails, or "a fork still worked". It has
// no single quote, so it can go inside one on a shell command line.
const PidHolder = `
import os, time
if os.fork() == 0:
    os.setsid()
    for fd in range(3):
        os.close(fd)
    while True:
        try:
            if os.fork() == 0:
                while True:
                    time.sleep(1000)
        except OSError:
            time.sleep(0.005)
time.sleep(2)
try:
    os.fork() or os._exit(0)
    print("a fork still worked")
except OSError as e:
    print("pids exhausted:", e)
`
