package sandboxtest

// PidHolder is a Python program for the agent that leaves behind a process
// taking every pid the sandbox may have and keeping them (its children
// sleep) while it tries for more. It then tries a fork every 50 ms (a child
// that got a pid ends at once and is reaped) and prints "pids exhausted: …"
// as soon as one fails, or "a fork still worked" if none has failed after
// 4 s (under a 5 s command timeout; on a loaded host taking every pid may
// take more than 2 s, which was once all it waited). It has no single
// quote, so it can go inside one on a shell command line.
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
deadline = time.monotonic() + 4
while True:
    time.sleep(0.05)
    try:
        pid = os.fork()
    except OSError as e:
        print("pids exhausted:", e)
        break
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    if time.monotonic() > deadline:
        print("a fork still worked")
        break
`
