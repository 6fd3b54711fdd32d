"""Generate the labelled detection corpus: ``python -m tests.detection_corpus.generate``.

Writes ``tests/data/detection_corpus.jsonl``. Every trace is built here from a
seeded random generator, so the file is reproducible (``tests/test_detection_corpus.py``
checks it matches this script). Each class of the issue on detection quality
has several variants: runaway loops an agent really falls into (cosmetically
different arguments, volatile results, long repeats, paraphrased calls,
repeated answers) and productive sessions that must not be flagged (polling with
back-off, reads between writes, long sessions, retry budgets, acknowledgements). Shell,
editor and conversational agents are written the way real ones work (one ``bash`` tool
whose edits print nothing, ``str_replace_editor`` views and edits, replies to a user),
productive and runaway, so each class is guarded without third-party data.
Times follow a model's pace: 1–4 s between steps, tool calls of 0.05–0.5 s.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from typing import Any

from tests.detection_corpus.harness import CORPUS_PATH, WORKSPACE, Label, Trace

SEED = 21
VARIANTS = 3


class Session:
    """Builds one trace's steps with a clock."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.t = 0.0
        self.steps: list[dict[str, Any]] = []
        self.loop_start: int | None = None

    def _tick(self, gap: float | None) -> float:
        self.t += gap if gap is not None else self.rng.uniform(1.0, 4.0)
        return round(self.t, 3)

    def call(
        self,
        tool: str,
        args: dict[str, Any],
        result: str,
        *,
        gap: float | None = None,
        duration: float | None = None,
        error: bool = False,
        annotations: dict[str, bool] | None = None,
    ) -> None:
        t = self._tick(gap)
        d = duration if duration is not None else round(self.rng.uniform(0.05, 0.5), 3)
        step: dict[str, Any] = {"call": tool, "args": args, "result": result, "t": t, "duration": d}
        if error:
            step["error"] = True
        if annotations:
            step["annotations"] = annotations
        self.steps.append(step)
        self.t += d

    def answer(self, text: str) -> None:
        self.steps.append({"answer": text, "t": self._tick(None)})

    def run(self, question: str) -> None:
        self.steps.append({"run": question, "t": self._tick(None)})

    def compaction(self) -> None:
        self.steps.append({"compaction": True, "t": self._tick(0.5)})

    def looping(self, after: int = 1) -> None:
        """The runaway begins ``after`` steps from now: its first step that repeats earlier
        work (the first pass of a cycle, the first call of a repeat, is not yet looping)."""
        self.loop_start = len(self.steps) + after

    def trace(self, name: str, cls: str, label: Label) -> Trace:
        return Trace(
            name, cls, label, tuple(self.steps), self.loop_start if label != "ok" else None
        )


# -- content -----------------------------------------------------------------------------

WORDS = (  # noqa: SIM905
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda sigma omega "
    "parser token cache queue worker config client server handler request retry"
).split()


def code(rng: random.Random, lines: int = 6) -> str:
    out = []
    for i in range(lines):
        a, b = rng.sample(WORDS, 2)
        out.append(f"def {a}_{b}_{i}(x):\n    return x.{b} + {rng.randint(0, 99)}")
    return "\n".join(out)


def search_results(rng: random.Random, n: int = 5) -> str:
    return "\n".join(
        f"{i + 1}. {' '.join(rng.sample(WORDS, 4)).title()} — https://docs.example.com/"
        f"{rng.choice(WORDS)}/{rng.randint(100, 999)}"
        for i in range(n)
    )


def now_iso(rng: random.Random, t: float) -> str:
    minutes = int(t // 60)
    return (
        f"2026-11-30T{10 + minutes // 60:02d}:{minutes % 60:02d}:"
        f"{int(t % 60):02d}.{rng.randint(0, 999):03d}Z"
    )


def prefix(s: Session, n: int | None = None) -> None:
    """Productive steps before the runaway: distinct reads and searches."""
    rng = s.rng
    for i in range(n if n is not None else rng.randint(2, 6)):
        kind = rng.randrange(3)
        if kind == 0:
            s.call("read_file", {"path": f"src/mod_{rng.choice(WORDS)}_{i}.py"}, code(rng))
        elif kind == 1:
            s.call(
                "grep",
                {"pattern": f"{rng.choice(WORDS)}_{i}", "path": "src"},
                f"src/mod_{i}.py:{rng.randint(1, 90)}",
            )
        else:
            s.call(
                "list_dir",
                {"path": f"src/pkg_{i}"},
                "\n".join(f"{w}.py" for w in rng.sample(WORDS, 4)),
            )


# -- runaway loops: cosmetically different arguments -----------------------------------------


def path_spellings(rng: random.Random) -> Trace:
    s = Session(rng)
    prefix(s)
    target = f"src/{rng.choice(WORDS)}/app.py"
    content = code(rng)
    failure = f"FAILED tests/test_app.py::test_{rng.choice(WORDS)} - assert 7 == 6"
    spellings = [
        target,
        f"./{target}",
        f"{WORKSPACE}/{target}",
        target.replace("/", "//", 1),
        f"src/../{target}",
        f"{WORKSPACE}/./{target}",
    ]
    s.looping()
    for i in range(30):
        s.call("read_file", {"path": spellings[i % len(spellings)]}, content)
        if rng.random() < 0.3:
            s.call("run_tests", {"target": "tests/test_app.py"}, failure)
    return s.trace("re-reading one file under different path spellings", "cosmetic_args", "loop")


def query_whitespace_case(rng: random.Random) -> Trace:
    s = Session(rng)
    prefix(s)
    words = rng.sample(WORDS, 3)
    results = search_results(rng)
    variants = [
        " ".join(words),
        "  ".join(words).upper(),
        " " + " ".join(words).title() + " ",
        "\t".join(words),
        " ".join(words).capitalize(),
    ]
    s.looping()
    for i in range(25):
        s.call("search", {"query": variants[i % len(variants)], "limit": 5}, results)
    return s.trace("the same search with whitespace and case changed", "cosmetic_args", "loop")


def nonce_cache_buster(rng: random.Random) -> Trace:
    s = Session(rng)
    prefix(s)
    page = f"<html><title>{rng.choice(WORDS)} status</title><p>Service degraded</p></html>"
    key = rng.choice(["nonce", "cache_buster", "_"])
    s.looping()
    for _ in range(25):
        s.call(
            "fetch", {"url": "https://status.example.com/", key: f"{rng.getrandbits(48):x}"}, page
        )
    return s.trace(f"fetching one page with a fresh {key}", "cosmetic_args", "loop")


def since_now(rng: random.Random) -> Trace:
    s = Session(rng)
    prefix(s)
    s.looping()
    for _ in range(25):
        s.call(
            "list_events",
            {"stream": "deploys", "since": now_iso(rng, s.t)},
            '{"events": [], "next": null}',
        )
    return s.trace("polling for events since <now>, without waiting", "cosmetic_args", "loop")


def rising_timeout(rng: random.Random) -> Trace:
    s = Session(rng)
    prefix(s)
    s.looping()
    for i in range(20):
        timeout = 5 * (i + 1)
        s.call(
            "http_get",
            {"url": "https://api.example.com/v1/report", "timeout": timeout},
            f"Error: ReadTimeout: no response from api.example.com after {timeout} s",
            error=True,
            duration=float(timeout),
        )
    return s.trace("the same request with a rising timeout", "cosmetic_args", "loop")


def page_past_end(rng: random.Random) -> Trace:
    s = Session(rng)
    total = rng.randint(2, 4)
    for page in range(1, total + 1):
        s.call(
            "list_issues",
            {"repo": "acme/api", "page": page},
            f'{{"items": {[rng.randint(100, 999) for _ in range(5)]}, "page": {page}, '
            f'"total_pages": {total}}}',
        )
    s.looping(2)
    for page in range(total + 1, total + 25):
        s.call(
            "list_issues",
            {"repo": "acme/api", "page": page},
            f'{{"items": [], "page": {page}, "total_pages": {total}}}',
        )
    return s.trace("paging on past the last page", "cosmetic_args", "loop")


# -- runaway loops: volatile results -----------------------------------------------------------


def poll_with_server_timestamp(rng: random.Random) -> Trace:
    s = Session(rng)
    prefix(s)
    job = f"job-{rng.randint(100, 999)}"
    s.looping()
    for _ in range(25):
        s.call(
            "job_status",
            {"job_id": job},
            f'{{"state": "queued", "position": 3, "checked_at": "{now_iso(rng, s.t)}"}}',
        )
    return s.trace(
        "polling a stuck job whose reply carries a timestamp", "volatile_results", "loop"
    )


def failing_test_duration(rng: random.Random) -> Trace:
    s = Session(rng)
    prefix(s)
    name = rng.choice(WORDS)
    s.looping()
    for _ in range(25):
        secs = rng.uniform(0.3, 2.5)
        s.call(
            "run_tests",
            {"target": "tests/"},
            f"FAILED tests/test_{name}.py::test_roundtrip - AssertionError\n"
            f"1 failed, 41 passed in {secs:.2f}s",
        )
        if rng.random() < 0.4:
            s.call(
                "read_file", {"path": f"tests/test_{name}.py"}, f"def test_roundtrip(): ...{name}"
            )
    return s.trace(
        "re-running a failing suite whose output differs in its duration",
        "volatile_results",
        "loop",
    )


def stuck_job_paced(rng: random.Random) -> Trace:
    s = Session(rng)
    prefix(s)
    wait = rng.choice([60, 120])
    s.looping(2)
    for _ in range(int(3 * 3600 / wait)):
        s.call("job_status", {"job_id": "nightly"}, '{"state": "queued", "position": 14}')
        s.call("sleep", {"seconds": wait}, f"slept {wait} s", duration=float(wait))
    return s.trace(f"a job stuck for hours, polled every {wait} s", "volatile_results", "loop")


# -- runaway loops: long repeats ---------------------------------------------------------------


def exploration_redone(rng: random.Random) -> Trace:
    s = Session(rng)
    length = rng.randint(20, 32)
    steps: list[tuple[str, dict[str, Any], str]] = []
    for i in range(length):
        kind = rng.randrange(3)
        if kind == 0:
            steps.append(("read_file", {"path": f"src/m{i}_{rng.choice(WORDS)}.py"}, code(rng, 3)))
        elif kind == 1:
            steps.append(
                (
                    "grep",
                    {"pattern": f"{rng.choice(WORDS)}{i}", "path": "src"},
                    f"src/m{i}.py:{rng.randint(1, 80)}: {rng.choice(WORDS)}",
                )
            )
        else:
            steps.append(("list_dir", {"path": f"src/p{i}"}, " ".join(rng.sample(WORDS, 5))))
    for tool, args, result in steps:
        s.call(tool, args, result)
    s.looping(0)
    for _ in range(3):
        for tool, args, result in steps:
            s.call(tool, args, result)
    return s.trace(f"a {length}-step exploration redone three more times", "long_repeats", "loop")


def long_cycle(rng: random.Random) -> Trace:
    s = Session(rng)
    prefix(s)
    period = rng.randint(5, 8)
    steps = [
        (
            rng.choice(["read_file", "grep", "git_diff", "list_dir"]),
            {"path": f"src/c{i}_{rng.choice(WORDS)}.py"},
            code(rng, 2),
        )
        for i in range(period)
    ]
    s.looping(period)
    for _ in range(8):
        for tool, args, result in steps:
            s.call(tool, args, result)
    return s.trace(f"a cycle of period {period}", "long_repeats", "loop")


# -- runaway loops: paraphrased calls and ping-pong --------------------------------------------


def paraphrased_search(rng: random.Random) -> Trace:
    s = Session(rng)
    prefix(s)
    a, b, c = rng.sample(WORDS, 3)
    results = search_results(rng, 6)
    phrasings = [
        f"{a} {b} {c}",
        f"how to {c} {a} {b}",
        f"{b} {c} for {a}s",
        f"What is the {a} {b} {c}?",
        f"{c} {b} {a} in the docs",
        f"find {a} {c} {b}s",
        f"{a.upper()} {b} {c}",
    ]
    s.looping()
    for i in range(20):
        s.call("web_search", {"query": phrasings[i % len(phrasings)]}, results)
    return s.trace("the same search reworded", "paraphrased_calls", "loop")


def synonym_search_shuffled(rng: random.Random) -> Trace:
    # Beyond the rules on purpose: synonyms, and the same hits in a different order.
    s = Session(rng)
    prefix(s)
    hits = search_results(rng, 6).splitlines()
    phrasings = [
        "fix flaky integration test",
        "repair intermittent integration test",
        "stabilise unreliable integration check",
        "flaky e2e test remedy",
        "intermittently failing integration test solution",
    ]
    s.looping()
    for i in range(20):
        rng.shuffle(hits)
        s.call("web_search", {"query": phrasings[i % len(phrasings)]}, "\n".join(hits))
    return s.trace(
        "synonyms searched again, the same hits reordered (a known miss)",
        "paraphrased_calls",
        "loop",
    )


def agents_ping_pong(rng: random.Random) -> Trace:
    s = Session(rng)
    prefix(s)
    topic = rng.choice(WORDS)
    reply = (
        f"Reviewer: I cannot approve the {topic} change yet; the rollback plan is missing. "
        f"(reviewed at {{ts}})"
    )
    s.looping()
    for i in range(20):
        s.call(
            "ask_agent",
            {
                "agent": "reviewer",
                "message": f"Draft v{i + 2}: please approve the {topic} change. "
                f"I have addressed your comments (round {i + 1}).",
            },
            reply.format(ts=now_iso(rng, s.t)),
        )
        s.call(
            "edit_draft",
            {"section": "summary", "text": f"{topic} change, revision {i + 2}"},
            "saved",
        )
    return s.trace("two agents ping-ponging a slowly varying draft", "paraphrased_calls", "loop")


# -- runaway loops: classics -------------------------------------------------------------------


def same_call_repeated(rng: random.Random) -> Trace:
    s = Session(rng)
    prefix(s)
    path = f"/etc/{rng.choice(WORDS)}.conf"
    content = f"{rng.choice(WORDS)}=1\nmode=strict"
    s.looping()
    for _ in range(25):
        s.call("read_file", {"path": path}, content)
    return s.trace("one call repeated", "classic", "loop")


def oscillation(rng: random.Random) -> Trace:
    s = Session(rng)
    prefix(s)
    a, b = rng.sample(WORDS, 2)
    s.looping(2)
    for _ in range(12):
        s.call("open_tab", {"url": f"https://example.com/{a}"}, f"page {a}")
        s.call("open_tab", {"url": f"https://example.com/{b}"}, f"page {b}")
    return s.trace("A→B oscillation", "classic", "loop")


def three_step_cycle(rng: random.Random) -> Trace:
    s = Session(rng)
    prefix(s)
    f = f"src/{rng.choice(WORDS)}.py"
    s.looping(3)
    for _ in range(8):
        s.call("git_status", {}, f"modified: {f}")
        s.call("git_diff", {"path": f}, "-    return sum(xs) + 1")
        s.call("git_checkout", {"path": f}, "Updated 1 path from the index")
    return s.trace("status, diff, checkout, again", "classic", "loop")


def same_error_forever(rng: random.Random) -> Trace:
    s = Session(rng)
    prefix(s)
    table = rng.choice(WORDS)
    s.looping()
    for _ in range(20):
        s.call(
            "sql_query",
            {"sql": f"SELECT * FROM {table}s WHERE id = 7"},
            f'Error: relation "{table}s" does not exist',
            error=True,
        )
    return s.trace("the same failing query, unchanged", "classic", "loop")


# -- runaway answers ---------------------------------------------------------------------------


def counter_answers(rng: random.Random) -> Trace:
    s = Session(rng)
    s.run("Watch the release pipeline and tell me when it is done.")
    s.answer("The release pipeline is still running (check 1).")
    s.looping()
    for n in range(2, 10):
        s.run("continue")
        s.answer(f"The release pipeline is still running (check {n}).")
    return s.trace("short answers where only a counter changes", "answers", "converged")


def date_answers(rng: random.Random) -> Trace:
    s = Session(rng)
    ticket = rng.randint(1000, 9999)
    s.run(f"Any news on ticket {ticket}?")
    s.looping(2)
    for n in range(9):
        s.answer(
            f"As of 2026-11-{20 + n:02d} {9 + n:02d}:{rng.randint(10, 59)} UTC "
            f"there is no update on ticket {ticket}."
        )
        s.run("check again")
    return s.trace("short answers where only a date changes", "answers", "converged")


def alternating_drafts(rng: random.Random) -> Trace:
    s = Session(rng)
    a, b = rng.sample(WORDS, 2)
    drafts = [
        f"Subject: {a} rollout. We will enable {a} for all users on Monday, "
        f"after the {b} migration.",
        f"Subject: {b} migration first. The {b} migration runs on Monday; the {a} "
        f"rollout follows once it is verified.",
    ]
    s.run("Draft the announcement.")
    s.answer(drafts[0])
    s.looping(3)
    for i in range(9):
        s.run("Please revise it.")
        s.answer(drafts[(i + 1) % 2])
    return s.trace("two drafts alternating", "answers", "converged")


def long_answer_one_word(rng: random.Random) -> Trace:
    s = Session(rng)
    vocab = rng.sample(WORDS, 8)
    body = [rng.choice(vocab) for _ in range(rng.randint(40, 120))]
    s.run("Summarise the incident.")
    s.answer(" ".join(body) + ".")
    s.looping()
    for _ in range(8):
        s.run("Try again.")
        body[rng.randrange(len(body))] = rng.choice(WORDS)
        s.answer(" ".join(body) + ".")
    return s.trace("a long answer changing one word per retry", "answers", "converged")


def rephrased_answer(rng: random.Random) -> Trace:
    s = Session(rng)
    city, country = rng.choice(
        [("Canberra", "Australia"), ("Ottawa", "Canada"), ("Bern", "Switzerland")]
    )
    forms = [
        f"The capital of {country} is {city}.",
        f"the capital of {country} is {city}!",
        f"{city} is the capital of {country}.",
        f"It is {city}: the capital of {country}.",
    ]
    s.run(f"What is the capital of {country}?")
    s.answer(forms[0])
    s.looping()
    for i in range(8):
        s.run(rng.choice(["are you sure?", "really?", "double-check"]))
        s.answer(forms[(i + 1) % len(forms)])
    return s.trace("rephrasing the same answer", "answers", "converged")


# -- productive work: polling ------------------------------------------------------------------


def poll_with_backoff(rng: random.Random) -> Trace:
    s = Session(rng)
    prefix(s)
    job = f"build-{rng.randint(10, 99)}"
    gap = rng.uniform(2, 4)
    for _ in range(rng.randint(7, 10)):
        s.call("job_status", {"job_id": job}, '{"state": "running"}', gap=gap)
        gap = min(gap * 2, 300.0)
    s.call("job_status", {"job_id": job}, '{"state": "succeeded"}', gap=gap)
    s.answer(f"{job} succeeded.")
    return s.trace("polling with exponential back-off until done", "polling", "ok")


def ci_wait_with_sleep(rng: random.Random) -> Trace:
    s = Session(rng)
    prefix(s)
    wait = rng.choice([30, 60, 120])
    for _ in range(rng.randint(8, 14)):
        s.call("ci_status", {"pr": 42}, f"pending (updated {now_iso(rng, s.t)})")
        s.call("sleep", {"seconds": wait}, f"slept {wait} s", duration=float(wait))
    s.call("ci_status", {"pr": 42}, "success: all 12 checks passed")
    s.answer("CI is green on #42.")
    return s.trace(f"a CI wait with sleep({wait}) ending in success", "polling", "ok")


def long_poll_tool(rng: random.Random) -> Trace:
    s = Session(rng)
    prefix(s)
    for _ in range(rng.randint(6, 12)):
        s.call(
            "wait_for_deploy",
            {"deploy_id": "d-7", "timeout": 120},
            "still rolling out",
            duration=120.0,
        )
    s.call(
        "wait_for_deploy",
        {"deploy_id": "d-7", "timeout": 120},
        "rolled out: 3/3 healthy",
        duration=40.0,
    )
    return s.trace("a long-poll tool that blocks until the deploy is done", "polling", "ok")


def capped_backoff(rng: random.Random) -> Trace:
    s = Session(rng)
    gap = 2.0
    for _ in range(14):
        s.call("queue_depth", {"queue": "ingest"}, '{"depth": "high"}', gap=gap)
        gap = min(gap * 2, 120.0)
    s.call("queue_depth", {"queue": "ingest"}, '{"depth": "normal"}', gap=gap)
    return s.trace("polling with capped back-off", "polling", "ok")


def job_progress(rng: random.Random) -> Trace:
    s = Session(rng)
    for p in range(0, 100, rng.choice([5, 8, 10])):
        s.call(
            "job_status",
            {"job_id": "etl-3"},
            f'{{"state": "running", "progress": {p}, "at": "{now_iso(rng, s.t)}"}}',
        )
    s.call("job_status", {"job_id": "etl-3"}, '{"state": "done", "progress": 100}')
    s.answer("The ETL job finished.")
    return s.trace("polling a job that progresses", "polling", "ok")


# -- productive work: reads between writes -----------------------------------------------------


def git_status_after_commit(rng: random.Random) -> Trace:
    s = Session(rng)
    for i in range(rng.randint(6, 10)):
        f = f"src/{rng.choice(WORDS)}_{i}.py"
        s.call("edit_file", {"path": f, "old": f"v{i}", "new": f"v{i + 1}"}, "edited 1 line")
        s.call(
            "git_commit",
            {"message": f"Bump {f} to v{i + 1}"},
            f"[main {rng.getrandbits(28):07x}] Bump {f} to v{i + 1}\n 1 file changed",
        )
        s.call("git_status", {}, "On branch main\nnothing to commit, working tree clean")
    return s.trace("git status after each commit", "reads_between_writes", "ok")


def tests_green_after_edits(rng: random.Random) -> Trace:
    s = Session(rng)
    for i in range(rng.randint(6, 12)):
        s.call(
            "edit_file",
            {"path": f"src/{rng.choice(WORDS)}.py", "old": f"a{i}", "new": f"b{i}"},
            "edited",
        )
        s.call("run_tests", {"target": "tests/"}, f"42 passed in {rng.uniform(2, 4):.2f}s")
    s.answer("All refactors done; the suite stays green.")
    return s.trace("the suite green after each edit", "reads_between_writes", "ok")


def schema_before_insert(rng: random.Random) -> Trace:
    s = Session(rng)
    schema = "orders(id int primary key, customer text, total numeric, created timestamptz)"
    for i in range(rng.randint(8, 14)):
        s.call("get_schema", {"table": "orders"}, schema, annotations={"read_only": True})
        s.call(
            "db_execute",
            {"sql": f"INSERT INTO orders VALUES ({i}, 'c{i}', {i * 3})"},
            "INSERT 0 1",
            annotations={"side_effecting": True},
        )
    return s.trace("a schema lookup before each insert", "reads_between_writes", "ok")


def annotated_writes(rng: random.Random) -> Trace:
    s = Session(rng)
    for i in range(rng.randint(6, 10)):
        s.call(
            "kv_read",
            {"key": "config"},
            '{"replicas": 3, "region": "eu-west-1"}',
            annotations={"read_only": True},
        )
        s.call(
            "kv_apply", {"key": f"job/{i}", "value": i}, "ok", annotations={"side_effecting": True}
        )
    return s.trace("a config read before each annotated write", "reads_between_writes", "ok")


# -- productive work: long sessions ------------------------------------------------------------


def long_healthy_session(rng: random.Random) -> Trace:
    s = Session(rng)
    files = [f"src/{w}_{i}.py" for i, w in enumerate(rng.sample(WORDS, 20))]
    contents = {f: code(rng, 3) for f in files}
    total = rng.randint(600, 1000)
    edits = 0
    while len(s.steps) < total:
        # One task: look around (re-reading files read in earlier tasks), edit, test.
        target = rng.choice(files)
        for f in dict.fromkeys([target, *rng.sample(files, rng.randint(0, 3))]):
            s.call("read_file", {"path": f}, contents[f])
        if rng.random() < 0.5:
            s.call(
                "grep",
                {"pattern": rng.choice(WORDS), "path": "src"},
                "\n".join(f"{g}:{rng.randint(1, 50)}" for g in rng.sample(files, 3)),
            )
        for _ in range(rng.randint(1, 2)):
            edits += 1
            contents[target] = code(rng, 3)
            s.call("edit_file", {"path": target, "old": f"x{edits}", "new": f"y{edits}"}, "edited")
            s.call("read_file", {"path": target}, contents[target])
        s.call(
            "run_tests", {"target": "tests/"}, f"{200 + edits} passed in {rng.uniform(5, 9):.2f}s"
        )
        if rng.random() < 0.05:
            s.compaction()
    return s.trace(f"a long healthy session ({total} calls)", "long_sessions", "ok")


def long_research_session(rng: random.Random) -> Trace:
    s = Session(rng)
    docs = {f"https://docs.example.com/{w}": search_results(rng, 3) for w in WORDS}
    total = rng.randint(600, 800)
    n = 0
    while len(s.steps) < total:
        # One question: search, read a few pages (some read before), take a note.
        n += 1
        s.call("web_search", {"query": " ".join(rng.sample(WORDS, 3))}, search_results(rng, 5))
        for url in rng.sample(list(docs), rng.randint(1, 3)):
            s.call("fetch", {"url": url}, docs[url])
        s.call(
            "write_note", {"text": f"finding {n}: {rng.choice(WORDS)} {rng.choice(WORDS)}"}, "saved"
        )
    return s.trace(f"a long research session ({total} calls)", "long_sessions", "ok")


# -- productive work: retries and acknowledgements ---------------------------------------------


def retry_budget(rng: random.Random) -> Trace:
    s = Session(rng)
    prefix(s)
    for i in range(3):
        url = f"https://api.example.com/v1/items/{rng.randint(1, 999)}"
        for _ in range(3):
            s.call(
                "http_get",
                {"url": url},
                f"Error: 503 Service Unavailable (request id {rng.getrandbits(64):016x})",
                error=True,
            )
        s.call("http_get", {"url": url}, f'{{"id": {i}, "name": "{rng.choice(WORDS)}"}}')
    return s.trace("three transient errors then success, per request", "retries", "ok")


def acknowledgements(rng: random.Random) -> Trace:
    s = Session(rng)
    for i in range(8):
        w = rng.choice(WORDS)
        s.run(
            rng.choice(
                [
                    f"Delete the stale branch feature/{w}-{i} please",
                    f"Rename {w}_{i}.py to {w}_{i}_old.py in the repo",
                    f"Add the label needs-triage to issue {100 + i} now",
                    f"Close pull request {200 + i} as superseded by main",
                ]
            )
        )
        s.call("run_command", {"cmd": f"task {i}"}, f"ok {i}")
        s.answer(rng.choice(["Done.", "Done!", "Done."]))
    return s.trace("'Done.' to different requests", "acknowledgements", "ok")


def flaky_test_rerun(rng: random.Random) -> Trace:
    s = Session(rng)
    prefix(s)
    name = rng.choice(WORDS)
    failure = f"FAILED tests/test_{name}.py::test_race - TimeoutError\n1 failed, 80 passed"
    s.call("run_tests", {"target": "tests/"}, failure + f" in {rng.uniform(9, 12):.2f}s")
    s.call("run_tests", {"target": "tests/"}, failure + f" in {rng.uniform(9, 12):.2f}s")
    s.call("run_tests", {"target": "tests/"}, f"81 passed in {rng.uniform(9, 12):.2f}s")
    s.answer("The failure was flaky; the suite passes.")
    return s.trace("a flaky test re-run until it passes", "retries", "ok")


def one_page_past_the_end(rng: random.Random) -> Trace:
    s = Session(rng)
    total = rng.randint(3, 6)
    for page in range(1, total + 2):
        items = [rng.randint(100, 999) for _ in range(5)] if page <= total else []
        s.call(
            "list_issues",
            {"repo": "acme/api", "page": page},
            f'{{"items": {items}, "page": {page}, "total_pages": {total}}}',
        )
    s.answer(f"There are {5 * total} open issues.")
    return s.trace("paging until an empty page", "classic_ok", "ok")


# -- productive work: classics -----------------------------------------------------------------


def coding_progressing(rng: random.Random) -> Trace:
    s = Session(rng)
    prefix(s)
    f = f"src/{rng.choice(WORDS)}.py"
    for i in range(rng.randint(3, 6)):
        s.call("read_file", {"path": f}, code(rng, 3))
        s.call("run_tests", {"target": "tests/"}, f"FAILED test_{i} - assert {i} == {i + 1}")
        s.call("edit_file", {"path": f, "old": f"+ {i}", "new": f"+ {i + 1}"}, "edited")
    s.call("run_tests", {"target": "tests/"}, "14 passed in 0.8s")
    s.answer("Fixed; all 14 tests pass.")
    return s.trace("a coding agent editing and re-testing", "classic_ok", "ok")


def search_paging(rng: random.Random) -> Trace:
    s = Session(rng)
    for page in range(1, rng.randint(6, 10)):
        s.call("search", {"query": "otel genai semconv", "page": page}, search_results(rng))
    s.answer("The GenAI conventions name spans 'chat {model}'.")
    return s.trace("paging through search results", "classic_ok", "ok")


def different_greps(rng: random.Random) -> Trace:
    s = Session(rng)
    for p in ("TODO", "FIXME", "XXX", "HACK", "deprecated", "print(", "breakpoint()"):
        s.call("grep", {"pattern": p, "path": "src"}, "no matches")
    s.answer("No leftover markers in src/.")
    return s.trace("different greps without matches", "classic_ok", "ok")


def evolving_answers(rng: random.Random) -> Trace:
    s = Session(rng)
    steps = [
        "install the package with pip",
        "attach a PrometheusObserver on port 9464",
        "import the Grafana dashboard",
        "set an alert on loop detections",
        "route alerts to the on-call channel",
    ]
    for i, step in enumerate(steps):
        s.run("next step?")
        s.answer(f"Step {i + 1}: {step}.")
    return s.trace("answers that build on each other", "classic_ok", "ok")


def reports_with_figures(rng: random.Random) -> Trace:
    s = Session(rng)
    body = " ".join(f"finding{i}" for i in range(30))
    for _ in range(5):
        s.run("Report the service health.")
        s.answer(
            f"Report: {body}. Latency p95 is {rng.randint(80, 200)} ms, errors "
            f"{rng.randint(1, 9) / 10} %, cost {rng.randint(2, 20)} USD."
        )
    return s.trace("hourly reports whose figures change", "classic_ok", "ok")


# -- shell agents: everything through one bash tool -------------------------------------------


def shell_result(rng: random.Random, output: str = "", code_: int = 0) -> str:
    """An observation as a mini-SWE-agent-style harness wraps it."""
    return f"<returncode>{code_}</returncode>\n<output>\n{output}</output>"


def shell_prefix(s: Session) -> str:
    """A shell agent finding its way: listings, greps and reads through ``bash``."""
    rng = s.rng
    module = f"src/{rng.choice(WORDS)}_{rng.randint(1, 99)}.py"
    s.call(
        "bash",
        {"command": f"cd {WORKSPACE} && ls -la src"},
        shell_result(
            rng,
            "\n".join(
                f"-rw-r--r-- 1 root root {rng.randint(100, 9000)} {w}.py"
                for w in rng.sample(WORDS, 5)
            ),
        ),
    )
    s.call(
        "bash",
        {"command": f"grep -rn 'def {rng.choice(WORDS)}' src | head -20"},
        shell_result(rng, f"{module}:{rng.randint(1, 200)}:def handler(x):"),
    )
    s.call("bash", {"command": f"sed -n '1,60p' {module}"}, shell_result(rng, code(rng, 4)))
    return module


def shell_agent_fixing(rng: random.Random) -> Trace:
    # Silent edits (sed -i, heredocs) between test runs whose failure message stays the
    # same for a while: constant feedback, not a loop. Resolves in the end.
    s = Session(rng)
    module = shell_prefix(s)
    s.call(
        "bash",
        {
            "command": "cat <<'EOF' > reproduce.py\nfrom app import handler\n"
            f"print(handler({rng.randint(1, 9)}))\nEOF"
        },
        shell_result(rng),
    )
    failure = shell_result(
        rng,
        'Traceback (most recent call last):\n  File "reproduce.py",'
        " line 2\nTypeError: unsupported operand",
        1,
    )
    for i in range(rng.randint(10, 14)):
        line = rng.randint(10, 90)
        s.call(
            "bash",
            {"command": f"sed -i '{line}s/x + {i}/x + {i + 1}/' {module}"},
            shell_result(rng),
        )
        s.call(
            "bash",
            {"command": f"sed -n '{line - 3},{line + 3}p' {module}"},
            shell_result(rng, code(rng, 2)),
        )
        s.call("python", {"command": "python reproduce.py"}, failure)
    s.call("python", {"command": "python reproduce.py"}, shell_result(rng, "42"))
    s.call(
        "bash",
        {"command": "cd /workspace/repo && python -m pytest -q tests"},
        shell_result(rng, f"{rng.randint(20, 90)} passed in 1.2s"),
    )
    s.call("bash", {"command": "git status && git diff"}, shell_result(rng, f" M {module}"))
    return s.trace("a shell agent editing through sed and heredocs", "shell_agents_ok", "ok")


def shell_agent_rerunning(rng: random.Random) -> Trace:
    # The same failing test run again and again with only reads between: nothing changed.
    s = Session(rng)
    module = shell_prefix(s)
    failure = shell_result(
        rng,
        f"FAILED tests/test_app.py::test_{rng.choice(WORDS)} - "
        f"assert {rng.randint(1, 9)} == 0\n1 failed",
        1,
    )
    s.call("bash", {"command": "python -m pytest -q tests/test_app.py"}, failure)
    s.looping(1)
    for i in range(12):
        if i % 2:
            s.call("bash", {"command": f"cat {module}"}, shell_result(rng, "def handler(x): ..."))
        s.call("bash", {"command": "python -m pytest -q tests/test_app.py"}, failure)
    return s.trace(
        "a shell agent re-running a failing test with nothing changed", "shell_agents", "loop"
    )


def shell_agent_redeleting(rng: random.Random) -> Trace:
    # Trivially varied spellings of one delete, each printing nothing.
    s = Session(rng)
    shell_prefix(s)
    target = f"/data/{rng.choice(WORDS)}"
    spellings = [
        f"find {target} -name '*.tmp' -type f -delete",
        f"find {target} -name '*.tmp' -type f -exec rm {{}} \\;",
        f"find {target} -name '*.tmp' -type f -exec rm -f {{}} \\;",
        f"find {target} -name '*.tmp' -type f -exec rm -rf {{}} \\;",
        f"find {target} -name '*.tmp' -type f -exec rm -rf -- {{}} \\;",
    ]
    s.call("bash", {"command": spellings[0]}, "")
    s.looping(2)
    for i in range(1, 16):
        s.call("bash", {"command": spellings[1 + i % 4]}, "")
    return s.trace(
        "a shell agent deleting the same files again in other spellings", "shell_agents", "loop"
    )


def codex_test(s: Session, result: str) -> None:
    """A Codex-style agent's test run: its nameless ``exec`` tool, the line in ``bash -lc``."""
    s.call("exec", {"cmd": "bash -lc 'python -m pytest -q tests/test_app.py'"}, result)


def codex_agent_fixing(rng: random.Random) -> Trace:
    # A Codex-style agent: a tool whose name says nothing ("exec") takes each line as
    # bash -lc '…'. Its silent edits are progress; the same failing test after each one
    # is no repeat. Resolves in the end.
    s = Session(rng)
    module = f"src/{rng.choice(WORDS)}_{rng.randint(1, 99)}.py"
    s.call("exec", {"cmd": f"bash -lc 'cd {WORKSPACE} && ls src'"}, shell_result(rng, module))
    s.call("exec", {"cmd": f"bash -lc \"sed -n '1,80p' {module}\""}, shell_result(rng, code(rng)))
    failure = shell_result(rng, f"FAILED tests/test_app.py::test_{rng.choice(WORDS)}\n1 failed", 1)
    for i in range(rng.randint(9, 13)):
        line = rng.randint(10, 90)
        s.call(
            "exec",
            {"cmd": f"bash -lc \"sed -i '{line}s/x + {i}/x + {i + 1}/' {module}\""},
            shell_result(rng),
        )
        codex_test(s, failure)
    codex_test(s, shell_result(rng, f"{rng.randint(5, 40)} passed"))
    return s.trace("a Codex-style agent editing through bash -lc", "shell_agents_ok", "ok")


def codex_agent_rerunning(rng: random.Random) -> Trace:
    # The same wrapped failing test again and again with only wrapped reads between.
    s = Session(rng)
    module = f"src/{rng.choice(WORDS)}_{rng.randint(1, 99)}.py"
    s.call("exec", {"cmd": f"bash -lc 'cd {WORKSPACE} && ls src'"}, shell_result(rng, module))
    failure = shell_result(rng, f"FAILED tests/test_app.py::test_{rng.choice(WORDS)}\n1 failed", 1)
    s.call("exec", {"cmd": "bash -lc 'python -m pytest -q'"}, failure)
    s.looping(1)
    for i in range(10):
        if i % 2:
            s.call("exec", {"cmd": f"bash -lc 'cat {module}'"}, shell_result(rng, "def f(x): ..."))
        s.call("exec", {"cmd": "bash -lc 'python -m pytest -q'"}, failure)
    return s.trace(
        "a Codex-style agent re-running a failing test with nothing changed",
        "shell_agents",
        "loop",
    )


# -- editor agents: view / str_replace tools --------------------------------------------------


def editor_view(s: Session, path: str, start: int, text: str) -> None:
    s.call(
        "str_replace_editor",
        {"command": "view", "path": path, "view_range": [start, start + 20]},
        f"Here's the result of running `cat -n` on {path}:\n{text}",
    )


def editor_agent_fixing(rng: random.Random) -> Trace:
    # Views, successful edits, the same range viewed again after each edit, builds.
    s = Session(rng)
    path = f"{WORKSPACE}/src/{rng.choice(WORDS)}.c"
    s.call("bash", {"command": f"grep -n 'match' {path}"}, f"{rng.randint(100, 400)}: match")
    start = rng.randint(100, 300)
    for i in range(rng.randint(4, 8)):
        editor_view(s, path, start, code(rng, 3))
        s.call(
            "str_replace_editor",
            {
                "command": "str_replace",
                "path": path,
                "old_str": f"alias(x, {i})",
                "new_str": f"alias(x, {i + 1})",
            },
            f"The file {path} has been edited. Here's the result of running `cat -n` on "
            f"a snippet of {path}: ...",
        )
        editor_view(s, path, start, code(rng, 3))
        s.call(
            "bash",
            {"command": "cd /workspace/repo && make -j4 2>&1 | tail -5"},
            f"error: {rng.choice(WORDS)}.c:{rng.randint(1, 400)}: expected ';'",
        )
    s.call("bash", {"command": "cd /workspace/repo && make -j4 2>&1 | tail -5"}, "Build OK")
    return s.trace("an editor agent viewing, editing and rebuilding", "editor_agents_ok", "ok")


def editor_agent_failing_edits(rng: random.Random) -> Trace:
    # str_replace rejected again and again (line numbers pasted into old_str), the same
    # range viewed between: a failed edit changes nothing.
    s = Session(rng)
    path = f"{WORKSPACE}/src/{rng.choice(WORDS)}.c"
    start = rng.randint(100, 300)
    text = code(rng, 3)
    editor_view(s, path, start, text)
    s.looping(3)
    for i in range(10):
        s.call(
            "str_replace_editor",
            {
                "command": "str_replace",
                "path": path,
                "old_str": f"{start + i}\t    case TK_MATCH:",
                "new_str": "    case TK_MATCH_CAPTURE:",
            },
            f"ERROR:\nNo replacement was performed, old_str `{start + i}\t    case "
            f"TK_MATCH:` did not appear verbatim in {path}.",
        )
        editor_view(s, path, start, text)
    return s.trace("an editor agent whose edits keep failing", "editor_agents", "loop")


def claude_code_read(s: Session, path: str, text: str) -> None:
    s.call(
        "Read",
        {"file_path": path, "offset": 1, "limit": 80},
        "\n".join(f"{n:>6}\t{line}" for n, line in enumerate(text.split("\n"), 1)),
    )


def claude_code_agent_fixing(rng: random.Random) -> Trace:
    # A Claude Code-style agent: Read, then Edit (file_path, old_string, new_string) that
    # works, then the same failing test through Bash, again and again; passes in the end.
    s = Session(rng)
    path = f"{WORKSPACE}/src/{rng.choice(WORDS)}.py"
    claude_code_read(s, path, code(rng, 6))
    failure = f"FAILED tests/test_app.py::test_{rng.choice(WORDS)} - assert 1 == 2\n1 failed"
    names = rng.sample(WORDS, rng.randint(8, 12))
    for old, new in itertools.pairwise(names):
        s.call(
            "Edit",
            {"file_path": path, "old_string": f"return {old}(x)", "new_string": f"return {new}(x)"},
            f"The file {path} has been updated. Here's the result of running `cat -n` on a "
            f"snippet of the edited file:\n    12\t    return {new}(x)",
        )
        s.call("Bash", {"command": "python -m pytest -q tests/test_app.py"}, failure)
    s.call(
        "Bash",
        {"command": "python -m pytest -q tests/test_app.py"},
        f"{rng.randint(5, 40)} passed",
    )
    return s.trace("a Claude Code-style agent editing and re-testing", "editor_agents_ok", "ok")


def claude_code_agent_failing_edits(rng: random.Random) -> Trace:
    # The same Edit refused for its old_string (the refusal in the result's words only, as
    # a log replayed without is_error has it), the new_string reworded each time, the file
    # read again between some of them.
    s = Session(rng)
    path = f"{WORKSPACE}/src/{rng.choice(WORDS)}.py"
    text = code(rng, 6)
    claude_code_read(s, path, text)
    old = f"    return {rng.choice(WORDS)}(x)"
    refused = (
        f"<tool_use_error>String to replace not found in file.\nString: {old}</tool_use_error>"
    )
    s.looping()  # the first retry
    for new in rng.sample(WORDS, 9):
        s.call(
            "Edit",
            {"file_path": path, "old_string": old, "new_string": f"    return {new}(x)"},
            refused,
        )
        if rng.random() < 0.3:
            claude_code_read(s, path, text)
    return s.trace(
        "a Claude Code-style agent whose edit keeps being refused", "editor_agents", "loop"
    )


def codex_agent_writing_files(rng: random.Random) -> Trace:
    # A Codex-style agent writing whole files by a heredoc inside a double-quoted bash -lc
    # script, then the same failing test: each new file is progress.
    s = Session(rng)
    module = f"src/{rng.choice(WORDS)}_{rng.randint(1, 99)}.py"
    failure = shell_result(rng, f"FAILED tests/test_app.py::test_{rng.choice(WORDS)}\n1 failed", 1)
    for name in rng.sample(WORDS, rng.randint(8, 12)):
        body = f"def {name}(x):\n    return x + 1\n"
        s.call(
            "exec", {"cmd": f"bash -lc \"cat > {module} <<'EOF'\n{body}EOF\""}, shell_result(rng)
        )
        codex_test(s, failure)
    codex_test(s, shell_result(rng, f"{rng.randint(5, 40)} passed"))
    return s.trace("a Codex-style agent writing files by heredoc", "shell_agents_ok", "ok")


def shell_agent_commenting(rng: random.Random) -> Trace:
    # A shell agent that comments its scripts ("# Let's …": an apostrophe outside quotes)
    # and leaves blank lines between their commands: each commented sed -i is an edit, so
    # the same failing test after it is no repeat. Resolves in the end.
    s = Session(rng)
    module = shell_prefix(s)
    failure = shell_result(rng, f"FAILED tests/test_app.py::test_{rng.choice(WORDS)}\n1 failed", 1)
    test = "# Let's run the failing test again\npython -m pytest -q tests/test_app.py"
    for i in range(rng.randint(9, 13)):
        line = rng.randint(10, 90)
        s.call(
            "bash",
            {
                "command": f"# Let's change line {line}: it's where x goes wrong\n"
                f"cd {WORKSPACE}\n\nsed -i '{line}s/x + {i}/x + {i + 1}/' {module}"
            },
            shell_result(rng),
        )
        s.call("bash", {"command": test}, failure)
    s.call("bash", {"command": test}, shell_result(rng, f"{rng.randint(5, 40)} passed"))
    return s.trace("a shell agent commenting its scripts", "shell_agents_ok", "ok")


def shell_agent_commenting_rerunning(rng: random.Random) -> Trace:
    # The same failing test re-run with nothing changed, under a new comment each time
    # ("# Attempt 3: let's …"): the comment is not the command, so it is the same call.
    s = Session(rng)
    shell_prefix(s)
    failure = shell_result(rng, f"FAILED tests/test_app.py::test_{rng.choice(WORDS)}\n1 failed", 1)
    s.looping(2)
    for i in range(rng.randint(8, 11)):
        s.call(
            "bash",
            {
                "command": f"# Attempt {i + 1}: let's see if it's passing now\n"
                "python -m pytest -q tests/test_app.py"
            },
            failure,
        )
    return s.trace("a shell agent re-running a test under new comments", "shell_agents", "loop")


NARRATIONS = (
    "Run the failing test",
    "Check whether the fix worked",
    "Run the test again to see if it passes now",
    "Verify the change",
    "Re-run the test suite for this module",
    "See if that did it",
)


def claude_code_agent_narrating_fixes(rng: random.Random) -> Trace:
    # A Claude Code-style agent that says why it runs each line (Bash's "description"):
    # each sed -i is an edit, so the same failing test after it, described anew, is no
    # repeat. Passes in the end.
    s = Session(rng)
    module = f"src/{rng.choice(WORDS)}.py"
    failure = f"FAILED tests/test_app.py::test_{rng.choice(WORDS)} - assert 1 == 2\n1 failed"
    test = "python -m pytest -q tests/test_app.py"
    for i in range(rng.randint(8, 12)):
        line = rng.randint(10, 90)
        s.call(
            "Bash",
            {
                "command": f"sed -i '{line}s/x + {i}/x + {i + 1}/' {module}",
                "description": f"Fix the off-by-one on line {line}",
            },
            "",
        )
        s.call("Bash", {"command": test, "description": rng.choice(NARRATIONS)}, failure)
    s.call(
        "Bash",
        {"command": test, "description": rng.choice(NARRATIONS)},
        f"{rng.randint(5, 40)} passed",
    )
    return s.trace(
        "a Claude Code-style agent describing its edits and test runs", "shell_agents_ok", "ok"
    )


def claude_code_agent_narrating_reruns(rng: random.Random) -> Trace:
    # The same failing test re-run with nothing changed, each time described otherwise:
    # the description is not the command, so it is the same call.
    s = Session(rng)
    failure = f"FAILED tests/test_app.py::test_{rng.choice(WORDS)} - assert 1 == 2\n1 failed"
    s.call("Bash", {"command": "git status --short", "description": "See what changed"}, "")
    s.looping(2)
    sayings = list(NARRATIONS)
    rng.shuffle(sayings)
    for i in range(rng.randint(8, 11)):
        s.call(
            "Bash",
            {
                "command": "python -m pytest -q tests/test_app.py",
                "description": sayings[i % len(sayings)],
            },
            failure,
        )
    return s.trace(
        "a Claude Code-style agent re-running a test under new descriptions",
        "shell_agents",
        "loop",
    )


# -- conversations: the loop is in what the agent says ----------------------------------------


def conversation_repeating(rng: random.Random) -> Trace:
    # The same reply with another one between each time (A X A Y A …): never three alike in
    # a row, yet the same request over and over.
    s = Session(rng)
    ask = (
        f"To change the reservation I need its six-letter reservation ID. Could you "
        f"please share it? It is on the confirmation e-mail from {rng.choice(WORDS)} air."
    )
    others = [
        "I understand this is frustrating.",
        "Unfortunately I cannot look reservations up by name.",
        "Basic economy fares cannot be modified.",
        "I can only change a booking once I can see it.",
        "Our policy does not let me search by passenger.",
        "I am sorry for the inconvenience this causes.",
    ]
    rng.shuffle(others)
    s.answer("Happy to help with your trip. Which reservation would you like to change?")
    s.looping(4)
    for other in others:
        s.answer(ask)
        s.answer(other)
    return s.trace(
        "a support agent asking for the same ID again and again", "conversations", "converged"
    )


def conversation_helping(rng: random.Random) -> Trace:
    # Replies that share their politeness but say new things each time.
    s = Session(rng)
    flights = [f"HAT{rng.randint(100, 999)}" for _ in range(6)]
    for i, flight in enumerate(flights):
        s.answer(
            f"Thank you! Flight {flight} on May {10 + i} departs at "
            f"{rng.randint(6, 21)}:{rng.choice(['05', '20', '45'])} from "
            f"{rng.choice(['JFK', 'SFO', 'SEA', 'ORD'])}; the fare is "
            f"{rng.randint(90, 900)} USD in {rng.choice(['economy', 'business'])}."
        )
    s.answer("Your new reservation is confirmed. Is there anything else I can help with?")
    s.answer("You're welcome, have a great trip!")
    return s.trace("a support agent answering new questions", "conversations_ok", "ok")


BUILDERS: tuple[Callable[[random.Random], Trace], ...] = (
    path_spellings,
    query_whitespace_case,
    nonce_cache_buster,
    since_now,
    rising_timeout,
    page_past_end,
    poll_with_server_timestamp,
    stuck_job_paced,
    failing_test_duration,
    exploration_redone,
    long_cycle,
    paraphrased_search,
    synonym_search_shuffled,
    agents_ping_pong,
    same_call_repeated,
    oscillation,
    three_step_cycle,
    same_error_forever,
    counter_answers,
    date_answers,
    alternating_drafts,
    long_answer_one_word,
    rephrased_answer,
    poll_with_backoff,
    ci_wait_with_sleep,
    long_poll_tool,
    capped_backoff,
    job_progress,
    git_status_after_commit,
    tests_green_after_edits,
    schema_before_insert,
    annotated_writes,
    long_healthy_session,
    long_research_session,
    retry_budget,
    acknowledgements,
    coding_progressing,
    search_paging,
    different_greps,
    evolving_answers,
    reports_with_figures,
    flaky_test_rerun,
    one_page_past_the_end,
    shell_agent_fixing,
    shell_agent_rerunning,
    shell_agent_redeleting,
    editor_agent_fixing,
    editor_agent_failing_edits,
    conversation_repeating,
    conversation_helping,
    codex_agent_fixing,
    codex_agent_rerunning,
    claude_code_agent_fixing,
    claude_code_agent_failing_edits,
    codex_agent_writing_files,
    shell_agent_commenting,
    shell_agent_commenting_rerunning,
    claude_code_agent_narrating_fixes,
    claude_code_agent_narrating_reruns,
)


def build(seed: int = SEED, variants: int = VARIANTS) -> list[Trace]:
    """Every trace: ``variants`` of each builder, from one seeded generator."""
    rng = random.Random(seed)
    traces = []
    for builder in BUILDERS:
        for v in range(variants):
            t = builder(rng)
            traces.append(Trace(f"{t.name} #{v + 1}", t.cls, t.label, t.steps, t.loop_start))
    return traces


def main() -> None:
    """Write the corpus file."""
    traces = build()
    CORPUS_PATH.parent.mkdir(parents=True, exist_ok=True)
    with CORPUS_PATH.open("w", encoding="utf-8") as f:
        for t in traces:
            f.write(t.to_json() + "\n")
    labels = [t.label for t in traces]
    print(
        f"{len(traces)} traces → {CORPUS_PATH} "
        f"({labels.count('loop')} loop, {labels.count('converged')} converged, "
        f"{labels.count('ok')} ok)"
    )


if __name__ == "__main__":
    main()
