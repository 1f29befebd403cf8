"""codegen/background.py: the daemon-thread queue of the background compiles."""
import threading

from fuser.codegen.background import DaemonQueue

from tests.compile_jobs import no_threads, passes_in_forked_child


def test_items_run_in_order_on_at_most_the_limit_of_threads_which_end_when_it_is_empty():
    ran, running, most = [], [0], [0]
    lock, gate = threading.Lock(), threading.Event()

    def run(item):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        gate.wait(30)
        with lock:
            ran.append(item)
            running[0] -= 1

    queue = DaemonQueue("test-queue", run, lambda: 2)
    queue.put(list(range(6)))
    assert queue.threads == 2 and not queue.wait(0.05)  # (held at the gate)
    gate.set()
    assert queue.wait(30)
    assert sorted(ran) == list(range(6)) and most[0] == 2 and queue.threads == 0
    one = DaemonQueue("test-queue", ran.append, lambda: 1)
    one.put(list(range(6, 12)))
    assert one.wait(30) and ran[6:] == list(range(6, 12))  # (one thread: in the order put)


def test_a_failing_item_leaves_the_others_running_and_the_queue_waitable():
    ran = []

    def run(item):
        if item == "bad":
            raise ValueError(item)
        ran.append(item)

    queue = DaemonQueue("test-queue", run, lambda: 1)
    queue.put(["a", "bad", "b"])
    assert queue.wait(30) and ran == ["a", "b"]


def test_items_no_thread_can_take_go_to_dropped(monkeypatch):
    dropped = []
    queue = DaemonQueue("test-queue", lambda item: None, lambda: 2, dropped.extend)
    no_threads(monkeypatch)
    queue.put([1, 2])
    assert dropped == [1, 2] and queue.wait(0) and not queue.items


def test_a_forked_child_forgets_the_parents_items_and_threads_and_runs_its_own():
    gate, ran = threading.Event(), []
    queue = DaemonQueue("test-queue", lambda item: gate.wait(30) if item == "held" else ran.append(item), lambda: 1)
    queue.put(["held", "parent's"])

    def in_child():
        queue.forget_in_child()  # (what the module queues do at a fork)
        empty = queue.wait(0)
        queue.put(["child's"])
        return empty and queue.wait(20) and ran == ["child's"]
    try:
        child_passed = passes_in_forked_child(in_child)
    finally:
        gate.set()
    assert queue.wait(30) and ran == ["parent's"] and child_passed


def test_at_exit_the_queues_start_nothing_more_and_wait_for_the_items_running(monkeypatch):
    from fuser.codegen import background

    monkeypatch.setattr(background, "_exiting", threading.Event())  # (this process goes on)
    ran, dropped, gate, started = [], [], threading.Event(), threading.Event()

    def run(item):
        if item == "held":
            started.set()
            gate.wait(30)
        ran.append(item)

    queue = DaemonQueue("test-queue", run, lambda: 1, dropped.extend)
    queue.put(["held", "a", "b"])
    assert started.wait(30)
    result = []
    stopping = threading.Thread(target=lambda: result.append(background.stop_at_exit(30)))
    stopping.start()
    stopping.join(0.2)
    assert stopping.is_alive() and background.exiting()  # (the held item is running)
    gate.set()
    stopping.join(30)
    assert result == [True] and ran == ["held"] and dropped == ["a", "b"]
    queue.put(["c"])  # (nothing starts once the process exits)
    assert ran == ["held"] and dropped == ["a", "b", "c"] and queue.threads == 0


def test_a_process_that_exits_while_an_item_runs_lets_it_end_and_drops_the_rest(tmp_path):
    import subprocess
    import sys

    code = f"""if True:
        import pathlib, time
        from fuser.codegen.background import DaemonQueue
        out = pathlib.Path({str(tmp_path / "ran")!r})
        def run(item):
            time.sleep(0.5)  # (the main thread has reached its exit by now)
            with out.open("a") as f:
                f.write(item + "\\n")
        DaemonQueue("test-queue", run, lambda: 1).put(["first", "second"])
        time.sleep(0.1)
    """
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "ran").read_text() == "first\n"  # (ended, not killed; the next one not started)
