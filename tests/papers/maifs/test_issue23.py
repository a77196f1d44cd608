"""Issue #23 behaviour: contended workloads (offered-load scaling hits its target, durations capped, training and
evaluation windows disjoint), equal footing (a lease release is a preemption that frees the GPUs, a conflicting
pick costs the agent the rest of its round) and the validity gates of learned policies on hand-made curves."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mlsys_repro.common.sim.cluster import PENDING, RUNNING
from mlsys_repro.common.traces.gpu import PhillyJobs
from mlsys_repro.papers.maifs import data, pipeline
from mlsys_repro.papers.maifs.env import EnvConfig, MaifsEnv
from mlsys_repro.papers.maifs.schemas import MaifsParams
from mlsys_repro.papers.maifs.windows import (
    Window,
    at_load,
    cap_durations,
    check_disjoint,
    contended,
    offered_load,
    philly_windows,
    split,
    stack,
)

# ---------------------------------------------------------------------------------------------- workloads


def _window(n=50, seed=0, name="w", base=0):
    rng = np.random.default_rng(seed)
    arr = np.sort(rng.uniform(0, 20 * 3600.0, n))
    arr -= arr[0]
    return Window(name, arr, rng.uniform(600, 6 * 3600.0, n), rng.choice([1, 2, 4, 8], n).astype(np.int32),
                  np.zeros(n, np.int32), np.arange(base, base + n, dtype=np.int64))


@pytest.mark.parametrize("target", [0.5, 0.9, 1.3])
def test_at_load_hits_the_target_utilisation_and_keeps_the_job_mix(target):
    w = _window()
    gpus = 32
    lam = (len(w) - 1) / (w.arrival[-1] - w.arrival[0])
    want = lam * (w.work * w.gpus).mean() / gpus  # lambda E[GPU-s] / capacity, by hand
    assert offered_load(w, gpus) == pytest.approx(want)
    s = at_load(w, target, gpus)
    assert offered_load(s, gpus) == pytest.approx(target, rel=1e-9)
    # only the time axis is scaled: same jobs, same order, same relative gaps
    np.testing.assert_array_equal(s.work, w.work)
    np.testing.assert_array_equal(s.gpus, w.gpus)
    gaps, sgaps = np.diff(w.arrival), np.diff(s.arrival)
    np.testing.assert_allclose(sgaps / sgaps.sum(), gaps / gaps.sum())
    # twice the load = half the arrival span
    assert at_load(w, 2 * target, gpus).arrival[-1] == pytest.approx(s.arrival[-1] / 2)
    with pytest.raises(ValueError):
        at_load(w, 0.0, gpus)


def test_contended_caps_durations_splits_and_scales_every_piece():
    w = _window(n=60)
    over = int((w.work > 2 * 3600.0).sum())
    assert over > 0
    capped, n = cap_durations(w, 2.0)
    assert n == over and capped.work.max() <= 2 * 3600.0
    out, dropped = contended([w], load=1.1, cluster_gpus=32, cap_duration_h=2.0, parts=3)
    assert len(out) == 3 and dropped == {"capped[duration>2h]": over}
    for piece in out:
        assert piece.work.max() <= 2 * 3600.0
        assert piece.arrival[0] == 0.0
        assert offered_load(piece, 32) == pytest.approx(1.1)
    # the pieces partition the window's trace rows
    np.testing.assert_array_equal(np.concatenate([p.source for p in out]), w.source)
    check_disjoint(out[:1], out[1:])
    with pytest.raises(ValueError):
        split(w, len(w) + 1)


def test_check_disjoint_rejects_shared_or_repeated_rows():
    a, b = _window(base=0), _window(base=50)
    check_disjoint([a], [b])
    with pytest.raises(ValueError, match="both window sets"):
        check_disjoint([a], [_window(base=25)])
    with pytest.raises(ValueError, match="overlap"):
        check_disjoint([a, a], [b])
    with pytest.raises(ValueError, match="no source"):
        check_disjoint([a.replace(source=None)], [b])


class _Profiles:
    """The part of :class:`Profiles` that window building uses (model assignment)."""

    def models_of(self, task):
        return [0]


def _fake_philly(n=4000, seed=0):
    rng = np.random.default_rng(seed)
    t0 = 1504483200.0  # 2017-09-04 UTC
    submit = np.sort(t0 + rng.uniform(0, 100 * 86400.0, n))  # to mid-December
    dur = rng.lognormal(8.0, 1.5, n).clip(30, 400 * 3600.0)
    gpus = rng.choice([1, 2, 4, 8, 16], n, p=[0.5, 0.2, 0.15, 0.1, 0.05]).astype(np.int32)
    return PhillyJobs(submit, dur, gpus, np.zeros(n, np.int64), "<fake>")


def test_philly_windows_are_at_load_capped_and_training_is_disjoint_from_evaluation():
    ph = _fake_philly()
    d = data.Data(_Profiles(), ph, None, {}, {})
    p = MaifsParams(jobs_per_window=60, eval_windows=12, train_windows=10, load=0.9, cap_duration_h=2.0,
                    train_loads=[0.7, 1.1])
    ev, dropped = data.eval_windows(d, p, 32, "philly")  # checks disjointness itself
    tr = data.training_windows(d, p, 32, "philly")
    assert len(ev) == 12 and len(tr) == 10
    assert dropped["capped[duration>2h]"] > 0
    for w in ev:
        assert len(w) == 60 and w.work.max() <= 2 * 3600.0
        assert offered_load(w, 32) == pytest.approx(0.9)
        assert ph.submit_s[w.source].min() >= 1509494400.0  # 2017-11-01: the unseen slice
    for k, w in enumerate(tr):
        assert offered_load(w, 32) == pytest.approx([0.7, 1.1][k % 2])
        assert ph.submit_s[w.source].max() < 1509494400.0
    check_disjoint(tr, ev)
    # the same windows at another load: same jobs, arrivals rescaled
    ev13, _ = data.eval_windows(d, p, 32, "philly", load=1.3)
    for a, b in zip(ev, ev13, strict=True):
        np.testing.assert_array_equal(a.source, b.source)
        assert offered_load(b, 32) == pytest.approx(1.3)
    # windows that would share jobs are refused
    with pytest.raises(ValueError, match="overlap"):
        philly_windows(ph, _Profiles(), cluster_gpus=32, start="2017-11-01", end="2017-11-03", jobs_per_window=60,
                       num_windows=40, rate_jobs_per_h=None, load=0.9)


# ---------------------------------------------------------------------------------------------- environment


def _env(tiny, wins, **kw):
    _, cl, sm, md = tiny
    base = dict(num_agents=2, num_candidates=4, max_substeps=4, round_s=100.0, makespan_weight=2.0, reward_scale=100.0,
                num_short=0, num_running=0, conflict_blocks=True, restore_s=0.0)
    cfg = EnvConfig(**{**base, **kw})
    return MaifsEnv(cl, sm, md, stack(wins), cfg)


@functools.partial(jax.jit, static_argnames=("cfg", "fn"))
def _env_call(cl, sm, md, windows, cfg, fn, *args):
    """``MaifsEnv(...).fn(*args)`` compiled, the arrays as arguments (CI time: one compilation per config and
    shape instead of op-by-op dispatch of every primitive)."""
    return getattr(MaifsEnv(cl, sm, md, windows, cfg), fn)(*args)


def _reset(env, w=0):
    return _env_call(env.cl, env.sm, env.md, env.windows, env.cfg, "reset_window", w)


def _step(env, st, picks, level=1):
    acts = {a: jnp.array([picks[i], level], jnp.int32) for i, a in enumerate(env.agents)}
    return _env_call(env.cl, env.sm, env.md, env.windows, env.cfg, "step_env", jax.random.key(0), st, acts)


def test_a_lease_release_is_a_preemption_that_frees_the_gpus(tiny):
    # three 4-GPU jobs at t=0 on 2 x 4 GPUs, a fourth arrives at t=1000: one job must wait
    w = Window("w", np.array([0.0, 0.0, 0.0, 1000.0]), np.full(4, 50_000.0), np.full(4, 4, np.int32),
               np.zeros(4, np.int32))
    env = _env(tiny, [w], num_running=1, restore_s=60.0)
    kk, r = 4, 1
    noop = kk + r
    obs, st = _reset(env)
    assert not np.asarray(obs["agent_0"]["mask"])[kk]  # nothing runs yet: no release option
    obs, st, *_ = _step(env, st, [0, 1])  # agent 0 takes job 0, agent 1 job 1
    status = np.asarray(st.sim.status)
    slot_of = np.asarray(st.sim.slot_job)
    running = {int(slot_of[i]) for i in np.flatnonzero(status == RUNNING)}
    assert running == {0, 1}
    # nobody can place: the clock moves on to the next arrival, a lease boundary (substep 0)
    assert int(st.substep) == 0 and float(st.sim.t) >= 1000.0
    mask0 = np.asarray(obs["agent_0"]["mask"])
    assert mask0[kk] and not mask0[:kk].any()  # release is a real option; no placement fits
    owner0 = np.asarray(st.sim.occ.owner)[0]
    victim = int(owner0[owner0 >= 0][0])
    left = float(st.sim.remaining[victim])
    obs, st, *_ = _step(env, st, [kk, noop])  # agent 0 releases its lease
    assert int(st.releases) == 1
    assert np.asarray(st.sim.status)[victim] == PENDING
    assert (np.asarray(st.sim.occ.owner)[0] < 0).all()  # its server's GPUs are free again
    assert float(st.sim.remaining[victim]) == left  # progress is kept; the restore is charged at the round's end
    # the freed server now fits a waiting job: agent 0 may place
    assert np.asarray(obs["agent_0"]["mask"])[:kk].any()
    # but releases are lease-boundary decisions only: at substep 1 agent 1 (a running job, a job waiting) has no
    # release option, and agent 0 none either although it now has placements (no free release-and-re-place churn)
    assert int(st.substep) == 1
    assert not np.asarray(obs["agent_1"]["mask"])[kk] and not np.asarray(obs["agent_0"]["mask"])[kk]
    assert int(st.steps) == 2  # one count per decision sub-step
    # the waiting job takes the freed server; at the round's end the victim is a net preemption: counted once and
    # charged its checkpoint-restore (60 s of work) before the round runs (it runs nowhere, so nothing else moves)
    waiting = int(np.flatnonzero((np.asarray(st.sim.status) == PENDING) & (np.arange(4) != victim))[0])
    cands = _env_call(env.cl, env.sm, env.md, env.windows, env.cfg, "candidates", st.sim)
    pick = int(np.flatnonzero(np.asarray(cands) == waiting)[0])
    obs, st, *_ = _step(env, st, [pick, noop])
    for _ in range(4):
        if int(st.substep) == 0:
            break
        obs, st, *_ = _step(env, st, [noop, noop])
    assert int(st.substep) == 0
    assert int(st.sim.stats.preemptions) == 1
    assert float(st.sim.remaining[victim]) == pytest.approx(left + 60.0)


def test_without_release_slots_agents_cannot_preempt(tiny):
    w = Window("w", np.zeros(3), np.full(3, 5000.0), np.full(3, 4, np.int32), np.zeros(3, np.int32))
    env = _env(tiny, [w], num_running=0)
    obs, _ = _reset(env)
    assert np.asarray(obs["agent_0"]["mask"]).shape == (5,)  # K placements + no-op


@pytest.mark.parametrize("blocks", [True, False])
def test_a_conflicting_pick_costs_the_agent_its_round(tiny, blocks):
    # two 1-GPU jobs; both agents pick candidate 0 (no coordination): the second pick fails
    w = Window("w", np.zeros(2), np.full(2, 5000.0), np.ones(2, np.int32), np.zeros(2, np.int32))
    env = _env(tiny, [w], conflict_blocks=blocks)
    kk = 4
    obs, st = _reset(env)
    obs, st, _, _, info = _step(env, st, [0, 0])
    assert int(info["conflicts"]) == 1 and int(info["decisions"]) == 1
    mask1 = np.asarray(obs["agent_1"]["mask"])
    t0 = float(st.sim.t)
    if not blocks:
        assert mask1[:kk].any()  # retried at once, with no time passing: a free conflict
        assert not np.asarray(st.blocked).any()
        return
    assert np.asarray(st.blocked).tolist() == [False, True]
    assert not mask1[:kk].any() and mask1[kk]  # only the no-op is left to it
    # it stays out until the clock moves on, even though job 1 would fit on its server
    while float(st.sim.t) == t0:
        assert not np.asarray(obs["agent_1"]["mask"])[:kk].any()
        obs, st, *_ = _step(env, st, [kk, kk])
    assert float(st.sim.t) == pytest.approx(t0 + 100.0)
    assert not np.asarray(st.blocked).any() and np.asarray(obs["agent_1"]["mask"])[:kk].any()


# ---------------------------------------------------------------------------------------------- gates


def test_converged_on_hand_made_curves():
    u = np.arange(100, dtype=float)
    flat = 5.0 + 2.0 * np.exp(-u / 5.0)  # plateaued long before the last fifths
    falling = 10.0 - 0.05 * u  # still improving ~20 % between the last two fifths
    noisy = flat + np.where(u % 2, 0.1, -0.1)
    worse = 5.0 + 0.01 * u  # getting worse is not "still improving"
    got = pipeline.converged(np.stack([flat, falling, noisy, worse]), tol=0.05)
    assert got.tolist() == [1.0, 0.0, 1.0, 1.0]
    # updates without a finished episode (NaN) are ignored; a fifth with none is not converged
    gappy = flat.copy()
    gappy[::3] = np.nan
    empty = flat.copy()
    empty[80:] = np.nan
    assert pipeline.converged(np.stack([gappy, empty]), tol=0.05).tolist() == [1.0, 0.0]
    assert pipeline.converged(np.ones((1, 1)), tol=0.05).tolist() == [0.0]  # too short to tell


def test_window_mean_known_windows_and_bad_input():
    curve = np.stack([np.arange(10, dtype=float), np.full(10, np.nan)])  # w = 2 updates
    assert pipeline.window_mean(curve, "first")[0] == 0.5
    assert pipeline.window_mean(curve, "previous")[0] == 6.5
    assert pipeline.window_mean(curve, "last")[0] == 8.5
    assert np.isnan(pipeline.window_mean(curve, "last")[1])  # no finished episode in the window
    assert pipeline.window_mean(np.arange(3.0), "last", frac=0.1).tolist() == [2.0]  # at least one update
    with pytest.raises(ValueError, match="which"):
        pipeline.window_mean(curve, "middle")
    with pytest.raises(ValueError, match="no 'previous' window"):
        pipeline.window_mean(np.ones((1, 1)), "previous")


def test_gates_per_seed_from_curves_and_the_untrained_check():
    u = np.arange(50, dtype=float)
    flat, falling = 4.0 + np.exp(-u), 10.0 - 0.1 * u
    # converged reads the monitored greedy curve (check_jct_h), not the noisy training-episode JCT (jct_h)
    tr = pipeline.Trained(names=["maifs", "dl2"], seeds=np.array([0, 1]), params=None, var=None,
                        curves={"check_jct_h": np.stack([flat, falling, flat, flat]),
                                "jct_h": np.stack([falling, flat, falling, falling])},
                        env_cfg=None, cfg=None, seconds=0,
                        check={"trained": np.array([3.0, 3.0, 4.0, 3.99]),
                               "untrained": np.array([4.0, 2.9, 4.0, 4.0])})
    p = MaifsParams(converge_tol=0.05, beats_margin=0.01)
    g = pipeline.gates(tr, "maifs", p)
    assert g["converged"].tolist() == [1.0, 0.0]
    assert g["beats_prior"].tolist() == [1.0, 0.0]  # seed 1: worse than its untrained network
    g = pipeline.gates(tr, "dl2", p)
    assert g["converged"].tolist() == [1.0, 1.0]
    assert g["beats_prior"].tolist() == [0.0, 0.0]  # equal, or less than 1 % better: not a training gain


def test_learning_curve_monitor_is_each_runs_greedy_mean_jct(tiny):
    """The monitor behind ``curve_check_jct_h`` and ``converged``: per run, the greedy episode's mean JCT (h) over
    the first ``n`` windows, computed by hand here from :func:`mlsys_repro.papers.maifs.train.evaluate`."""
    import jax

    from mlsys_repro.common.repro.cache import RunCache
    from mlsys_repro.papers.maifs.model import variant
    from mlsys_repro.papers.maifs.train import Problem, TrainConfig, evaluate, make_train
    from tests.papers.maifs.test_env_model import ECFG, windows

    spec, cl, sm, md = tiny
    cfg = TrainConfig(num_envs=2, rollout_len=8, num_updates=2, updates_per_chunk=1, epochs=1, minibatches=2,
                      lr=3e-4, gamma=0.99, gae_lambda=0.95, clip_eps=0.2, ent_coef=0.01, hidden=8, network="maifs",
                      paired=2, prior_beta=0.0, credit="team", cf_lambda=0.0, adv_clip=5.0, bc_rounds=0, bc_epochs=1,
                      bc_lr=1e-3, bc_dagger=0.0)
    _, _, curve_v = pipeline._compiled(ECFG, cfg, spec.num_servers, RunCache())
    init, _, _, graphdef = make_train(ECFG, cfg, spec.num_servers)
    jobs = stack(windows(seed=0) + windows(seed=1, burst=True) + windows(seed=2))
    prob = Problem(cl, sm, md, jobs)
    var = jax.tree.map(lambda *x: jnp.stack(x), variant(), variant(coordination=False))
    rs = jax.jit(jax.vmap(init, in_axes=(0, 0, None)))(jnp.stack([jax.random.key(0), jax.random.key(1)]), var, prob)
    got = np.asarray(curve_v(rs.params, var, prob, 2))
    want = np.zeros(2)
    ev = jax.jit(lambda prm, v, w: evaluate(ECFG, graphdef, prm, v, prob, w))  # one compilation, four episodes
    for r in range(2):
        prm, v = jax.tree.map(lambda x, r=r: x[r], rs.params), jax.tree.map(lambda x, r=r: x[r], var)
        for w in range(2):
            st = ev(prm, v, w)
            n = int(jobs.num_jobs[w])
            want[r] += float(np.mean(np.asarray(st.sim.finish)[:n] - np.asarray(jobs.arrival[w])[:n])) / 3600.0 / 2
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert got.shape == (2,) and np.all(got > 0)


# ---------------------------------------------------------------------------------------------- claim boundary


def test_best_baseline_is_the_best_heuristic_per_metric_and_the_boundary_is_the_gain_over_it():
    from mlsys_repro.papers.maifs.experiments import best_baseline_rows, boundary_rows

    rows = []
    for pol, jct, span in (("fifo", 5.0, 20.0), ("srtf", 3.0, 24.0), ("tetris", 4.0, 19.0), ("maifs", 2.0, 21.0),
                           ("maifs_prior", 1.0, 10.0)):
        for seed in (0, 1):
            rows += [{"policy": pol, "seed": seed, "metric": "avg_jct_h", "value": jct + 0.1 * seed, "unit": "h",
                      "load": 0.9},
                     {"policy": pol, "seed": seed, "metric": "makespan_h", "value": span, "unit": "h", "load": 0.9}]
    best = best_baseline_rows(rows, ["fifo", "srtf", "tetris"])  # learned rows never count as baselines
    picked = {(r["metric"], r["seed"]): (r["picked"], r["value"]) for r in best}
    assert picked[("avg_jct_h", 0)] == ("srtf", 3.0) and picked[("avg_jct_h", 1)] == ("srtf", 3.1)
    assert picked[("makespan_h", 0)] == ("tetris", 19.0)  # picked per metric
    assert all(r["policy"] == "best_baseline" and r["load"] == 0.9 for r in best)
    import pandas as pd

    gain = {(r["metric"], r["seed"]): r["value"] for r in boundary_rows(pd.DataFrame(rows + best), "maifs")}
    assert gain[("jct_reduction_vs_best_pct", 0)] == pytest.approx(100 * (1 - 2.0 / 3.0))
    assert gain[("makespan_reduction_vs_best_pct", 1)] == pytest.approx(100 * (1 - 21.0 / 19.0))  # negative: loses


# ---------------------------------------------------------------------------------------------- configs


@pytest.mark.parametrize("exp", ["headline_philly", "headline_saturn", "load_sweep", "ablation", "heavy_tail"])
@pytest.mark.parametrize("profile", ["smoke", "default"])
def test_every_experiment_runs_on_equal_footing_and_disjoint_contended_windows(exp, profile):
    from mlsys_repro.common.repro.config import compose, experiment_node

    node = experiment_node(compose([f"experiment=maifs/{exp}", f"profile={profile}"]))
    p = MaifsParams(**node.params)
    assert p.lookahead == p.num_candidates  # heuristics scan as many pending jobs as an agent sees
    assert p.num_running > 0 and p.conflict_blocks  # agents can preempt; conflicts cost a round
    assert p.cap_duration_h > 0 and p.load > 0  # the headline regime is capped; heavy_tail evaluates uncapped too
    assert not set(p.saturn_train) & set(p.saturn_eval)
    if profile == "default":
        # full episodes, paired on the same window (the input-dependent baseline), and enough of them
        assert p.paired >= 2 and p.num_envs % p.paired == 0
        assert p.num_updates * p.num_envs >= 384
        assert p.rollout_len >= (p.jobs_per_window if exp != "headline_saturn" else 2 * 40)
        if exp != "headline_saturn":
            assert 20 <= p.eval_windows <= 40
        else:
            assert 20 <= len(p.saturn_eval) * p.saturn_parts <= 40
        if exp == "load_sweep":
            assert min(p.loads) < 0.9 < max(p.loads)
        if exp == "heavy_tail":
            assert p.cap_duration_h in p.tail_caps_h and 0.0 in p.tail_caps_h  # the headline cap and uncapped
        assert p.bc_rounds >= 1  # the warm start is the behaviour clone
    pols = list(node.policies)
    if exp not in ("ablation", "heavy_tail") or profile == "default":
        assert "maifs_prior" in pols and "maifs" in pols
    if exp in ("ablation", "headline_philly") and profile == "default":
        assert "maifs_cold" in pols  # the cold start is its own labelled row
