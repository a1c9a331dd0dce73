"""PPO against an independent derivation from the papers' formulas (issue 16 item 4).

- GAE (Schulman et al. 2016): a hand-worked case and a brute-force sum of discounted TD errors,
  cut at episode ends, in place of the recursion.
- The loss: per sample from PPO's eq. 7 (min of the unclipped and clipped objectives) and a
  clipped value loss, in numpy.
- One whole training run: a reference loop written from those formulas (a plain list of
  ``LabelEnv``s with same-step autoreset, brute-force GAE, the min-form loss, gradient
  clipping by hand) reaches the same weights and mean return as :func:`ppo.train`.
"""

from __future__ import annotations

import time
import warnings

import numpy as np
import pytest
import torch
from controller_fixtures import made_label_trace
from torch.distributions.categorical import Categorical

from helm_plan.controller import ppo
from helm_plan.controller.env import SHIFTS, LabelEnv, RewardConfig
from helm_plan.controller.features import N_FEATURES

TRACES = [made_label_trace(1), made_label_trace(2)]
"""Two traces, so a reset also draws which one."""


def brute_gae(rewards, values, dones, next_value, next_done, gamma, lam):
    """A_t = Σ_k (γλ)^k δ_{t+k}, δ_k = r_k + γ V_{k+1} (1 − d_{k+1}) − V_k, stopping after the
    step that ends the episode (d_{k+1} = 1: observation k+1 starts a new one)."""
    T, n = rewards.shape
    V = np.vstack([values, next_value.reshape(1, -1)])
    D = np.vstack([dones, next_done.reshape(1, -1)])
    adv = np.zeros((T, n))
    for e in range(n):
        for t in range(T):
            total, weight = 0.0, 1.0
            for k in range(t, T):
                cont = 1.0 - D[k + 1, e]
                total += weight * (rewards[k, e] + gamma * V[k + 1, e] * cont - V[k, e])
                if cont == 0.0:
                    break
                weight *= gamma * lam
            adv[t, e] = total
    return adv, adv + values


def _gae(rewards, values, dones, next_value, next_done, gamma, lam):
    t = lambda a: torch.as_tensor(np.asarray(a, dtype=np.float64))  # noqa: E731
    args = ppo.Args(gamma=gamma, gae_lambda=lam)
    adv, ret = ppo.gae(t(rewards), t(values), t(dones), t(next_value), t(next_done), args)
    return adv.numpy(), ret.numpy()


def test_gae_hand_worked():
    # γ = λ = 0.5, V = 0, bootstrap V = 4: δ = (1, 2, 3 + 0.5·4) = (1, 2, 5);
    # A2 = 5, A1 = 2 + 0.25·5 = 3.25, A0 = 1 + 0.25·3.25 = 1.8125
    r = [[1.0], [2.0], [3.0]]
    z = [[0.0], [0.0], [0.0]]
    adv, ret = _gae(r, z, z, [[4.0]], [0.0], 0.5, 0.5)
    np.testing.assert_allclose(adv[:, 0], [1.8125, 3.25, 5.0])
    np.testing.assert_allclose(ret, adv)
    # step 1 ends an episode (observation 2 starts one): δ1 = 2 (no bootstrap), A1 = 2,
    # A0 = 1 + 0.25·2 = 1.5; A2 = 5 as before
    adv, _ = _gae(r, z, [[0.0], [0.0], [1.0]], [[4.0]], [0.0], 0.5, 0.5)
    np.testing.assert_allclose(adv[:, 0], [1.5, 2.0, 5.0])
    # the last step ends an episode: nothing is bootstrapped from the next (new) one
    adv, _ = _gae(r, z, z, [[4.0]], [1.0], 0.5, 0.5)
    np.testing.assert_allclose(adv[:, 0], [1.0 + 0.25 * (2 + 0.25 * 3), 2 + 0.25 * 3, 3.0])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gae_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    T, n = 9, 3
    rewards, values = rng.normal(size=(T, n)), rng.normal(size=(T, n))
    dones = (rng.uniform(size=(T, n)) < 0.25).astype(float)
    nv, nd = rng.normal(size=(1, n)), (rng.uniform(size=n) < 0.5).astype(float)
    gamma, lam = 0.9, 0.8
    adv, ret = _gae(rewards, values, dones, nv, nd, gamma, lam)
    ref_adv, ref_ret = brute_gae(rewards, values, dones, nv, nd, gamma, lam)
    np.testing.assert_allclose(adv, ref_adv, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ret, ref_ret, rtol=1e-12, atol=1e-12)


def ref_loss(newlp, oldlp, ent, newv, adv, ret, oldv, clip, ent_coef, vf_coef):
    """−L^CLIP − c2·S + c1·L^V per sample in numpy (PPO eq. 7 and 9; CleanRL's value clip)."""
    n = len(adv)
    mean = sum(adv) / n
    std = np.sqrt(sum((a - mean) ** 2 for a in adv) / (n - 1))  # unbiased, as torch's
    surr, vl = [], []
    for i in range(n):
        a = (adv[i] - mean) / (std + 1e-8)
        rho = np.exp(newlp[i] - oldlp[i])
        surr.append(min(rho * a, min(max(rho, 1 - clip), 1 + clip) * a))
        v_clip = oldv[i] + min(max(newv[i] - oldv[i], -clip), clip)
        vl.append(0.5 * max((newv[i] - ret[i]) ** 2, (v_clip - ret[i]) ** 2))
    return -np.mean(surr) - ent_coef * np.mean(ent) + vf_coef * np.mean(vl)


@pytest.mark.parametrize("clip,ent_coef,vf_coef", [(0.2, 0.01, 0.5), (0.1, 0.3, 2.0)])
def test_loss_matches_per_sample_formula(clip, ent_coef, vf_coef):
    rng = np.random.default_rng(4)
    n = 40
    oldlp = np.log(rng.uniform(0.05, 1.0, n))
    newlp = oldlp + rng.normal(0, 0.4, n)  # ratios well outside [1 − ε, 1 + ε] both ways
    oldv = rng.normal(size=n)
    newv = oldv + rng.normal(0, 0.5, n)  # value moves beyond ±ε too
    adv, ret, ent = rng.normal(1.0, 2.0, n), rng.normal(size=n), rng.uniform(0, 2, n)
    args = ppo.Args(clip_coef=clip, ent_coef=ent_coef, vf_coef=vf_coef)
    t = torch.as_tensor
    got = ppo.ppo_loss(t(newlp), t(oldlp), t(ent), t(newv), t(adv), t(ret), t(oldv), args)
    want = ref_loss(newlp, oldlp, ent, newv, adv, ret, oldv, clip, ent_coef, vf_coef)
    assert float(got) == pytest.approx(want, rel=1e-12, abs=1e-12)
    # the clip binds on both sides in this draw, so a wrong bound is visible
    rho = np.exp(newlp - oldlp)
    assert (rho > 1 + clip).any() and (rho < 1 - clip).any()


def reference_train(traces, args: ppo.Args):
    """The same PPO written from the formulas above (weights, mean return of the last rollout)."""
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    n, T = args.num_envs, args.num_steps
    envs = [LabelEnv(traces, args.reward) for _ in range(n)]
    agent = ppo.Agent(N_FEATURES, len(SHIFTS), args.hidden).double()
    opt = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    cur = np.stack([env.reset(seed=args.seed + i)[0] for i, env in enumerate(envs)])
    starts = np.zeros(n)  # 1 where cur is the first observation after an autoreset
    ep_ret = np.zeros(n)
    iters = max(args.total_timesteps // (n * T), 1)
    for it in range(iters):
        for g in opt.param_groups:  # linear annealing: full rate first, → 0 after the last
            g["lr"] = args.learning_rate * (iters - it) / iters
        obs, A, LP, R, D, V, finished = [], [], [], [], [], [], []
        for _ in range(T):
            x = torch.as_tensor(cur)
            with torch.no_grad():
                dist = Categorical(logits=agent.actor(x))
                a = dist.sample()
                obs.append(cur.copy()), A.append(a), LP.append(dist.log_prob(a))
                V.append(agent.critic(x).flatten().numpy()), D.append(starts.copy())
            rew, nxt, nstart = np.zeros(n), np.zeros_like(cur), np.zeros(n)
            for i, env in enumerate(envs):
                o, rew[i], term, trunc, _ = env.step(int(a[i]))
                ep_ret[i] += rew[i]
                if term or trunc:
                    finished.append(ep_ret[i])
                    ep_ret[i] = 0.0
                    o, _ = env.reset()
                nxt[i], nstart[i] = o, float(term or trunc)
            R.append(rew)
            cur, starts = nxt, nstart
        with torch.no_grad():
            boot = agent.critic(torch.as_tensor(cur)).flatten().numpy()
        adv, ret = brute_gae(np.array(R), np.array(V), np.array(D), boot, starts,
                             args.gamma, args.gae_lambda)  # fmt: skip
        b_obs = torch.as_tensor(np.concatenate(obs))
        b_act = torch.cat(A)
        b_lp, b_adv = torch.cat(LP), torch.as_tensor(adv.reshape(-1))
        b_ret, b_val = torch.as_tensor(ret.reshape(-1)), torch.as_tensor(np.array(V).reshape(-1))
        inds = np.arange(n * T)
        # num_minibatches parts covering the batch once, the first (B mod k) one sample larger
        q, extra = divmod(n * T, args.num_minibatches)
        sizes = [q + (k < extra) for k in range(args.num_minibatches)]
        for _ in range(args.update_epochs):
            rng.shuffle(inds)
            for lo, size in zip(np.cumsum([0, *sizes[:-1]]), sizes, strict=True):
                i = torch.as_tensor(inds[lo : lo + size])
                dist = Categorical(logits=agent.actor(b_obs[i]))
                newlp, ent = dist.log_prob(b_act[i]), dist.entropy()
                newv = agent.critic(b_obs[i]).flatten()
                a = b_adv[i]
                a = (a - a.mean()) / (torch.sqrt(((a - a.mean()) ** 2).sum() / (len(a) - 1)) + 1e-8)
                rho = torch.exp(newlp - b_lp[i])
                c = args.clip_coef
                l_clip = torch.minimum(rho * a, rho.clamp(1 - c, 1 + c) * a).mean()
                v_clip = b_val[i] + (newv - b_val[i]).clamp(-c, c)
                l_v = 0.5 * torch.maximum((newv - b_ret[i]) ** 2, (v_clip - b_ret[i]) ** 2).mean()
                loss = -l_clip - args.ent_coef * ent.mean() + args.vf_coef * l_v
                opt.zero_grad()
                loss.backward()
                grads = [p.grad for p in agent.parameters()]
                norm = float(np.sqrt(sum(float((g**2).sum()) for g in grads)))
                for g in grads:  # global-norm clipping (Pascanu et al. 2013), as torch's
                    g.mul_(min(args.max_grad_norm / (norm + 1e-6), 1.0))
                opt.step()
    lin = [m for m in agent.actor if isinstance(m, torch.nn.Linear)]
    weights = {}
    for k, m in enumerate(lin):
        weights[f"W{k}"], weights[f"b{k}"] = m.weight.detach().numpy(), m.bias.detach().numpy()
    return weights, (float(np.mean(finished)) if finished else float("nan"))


@pytest.mark.parametrize(
    "kw",
    [
        # two iterations (annealing, a rollout carried over), uneven minibatches (48 / 5),
        # a large rate so both clips and the gradient clip bind
        dict(num_envs=2, num_steps=24, total_timesteps=96, num_minibatches=5, update_epochs=2,
             learning_rate=0.05, max_grad_norm=0.3, hidden=8),
        # defaults of the loss, one environment, three iterations
        dict(num_envs=1, num_steps=16, total_timesteps=48, num_minibatches=2, update_epochs=3,
             hidden=6, gamma=0.7, gae_lambda=0.5, ent_coef=0.2, vf_coef=1.5, clip_coef=0.1,
             reward=RewardConfig(shift_cost=2.0)),
    ],
)  # fmt: skip
def test_train_matches_reference_loop(kw):
    traces = TRACES
    args = ppo.Args(seed=11, **kw)
    t0 = time.perf_counter()
    got = ppo.train(traces, args)
    wall = time.perf_counter() - t0
    ref_w, ref_ret = reference_train(traces, args)
    assert sorted(got.weights) == ["W0", "W1", "W2", "b0", "b1", "b2"]
    for k, v in ref_w.items():
        assert got.weights[k].dtype == np.float64
        np.testing.assert_allclose(got.weights[k], v, rtol=1e-9, atol=1e-12, err_msg=k)
    assert got.mean_episode_return == pytest.approx(ref_ret, rel=1e-12)
    assert 0.0 < got.seconds <= wall


def test_train_reports_nan_return_when_no_episode_ends():
    # 12 windows: an episode is 11 steps, longer than the single 8-step rollout
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # NaN by choice, not numpy's mean of nothing
        res = ppo.train(TRACES, ppo.Args(num_envs=2, num_steps=8, total_timesteps=16))
    assert np.isnan(res.mean_episode_return)


def test_train_reports_progress_per_iteration():
    seen = []
    args = ppo.Args(num_envs=1, num_steps=4, total_timesteps=12, num_minibatches=2, hidden=4)
    ppo.train(TRACES, args, lambda i, n: seen.append((i, n)))
    assert seen == [(1, 3), (2, 3), (3, 3)]


def test_args_derived_sizes():
    a = ppo.Args(num_envs=3, num_steps=5, num_minibatches=2, total_timesteps=31)
    assert (a.batch_size, a.minibatch_size, a.num_iterations) == (15, 7, 2)
    b = ppo.Args(num_envs=2, num_steps=2, num_minibatches=2, total_timesteps=3)
    assert (b.minibatch_size, b.num_iterations) == (2, 1)  # never zero iterations


def test_args_reject_minibatches_of_one_sample():
    from helm_plan.errors import ConfigError

    # 4 samples in 3 minibatches would leave one of a single sample: its advantage std is NaN
    with pytest.raises(ConfigError, match="^num_minibatches must leave at least 2 samples per "
                       "minibatch, got 3 minibatches of a 4-sample rollout$") as e:  # fmt: skip
        ppo.Args(num_envs=2, num_steps=2, num_minibatches=3)
    assert e.value.hint == "lower num_minibatches or raise num_envs x num_steps"
    assert ppo.Args(num_envs=2, num_steps=2, num_minibatches=2).minibatch_size == 2


@pytest.mark.parametrize(
    "field", ["total_timesteps", "num_envs", "num_steps", "num_minibatches", "update_epochs",
              "hidden"],
)  # fmt: skip
def test_args_reject_non_positive_counts(field):
    from helm_plan.errors import ConfigError

    with pytest.raises(ConfigError, match=field):
        ppo.Args(**{field: 0})
    assert getattr(ppo.Args(**{field: 1}), field) == 1
    with pytest.raises(ConfigError, match=field):
        ppo.Args(**{field: 2.0})  # a count is an integer


def test_args_reject_non_positive_learning_rate():
    from helm_plan.errors import ConfigError

    with pytest.raises(ConfigError, match="^learning_rate must be"):
        ppo.Args(learning_rate=0.0)


def test_agent_initialisation_is_orthogonal_with_the_cleanrl_gains():
    torch.manual_seed(0)
    agent = ppo.Agent(N_FEATURES, len(SHIFTS), 16).double()
    gains = {"actor": [np.sqrt(2), np.sqrt(2), 0.01], "critic": [np.sqrt(2), np.sqrt(2), 1.0]}
    for name, net in (("actor", agent.actor), ("critic", agent.critic)):
        lin = [m for m in net if isinstance(m, torch.nn.Linear)]
        assert [type(m) for m in net].count(torch.nn.Tanh) == 2
        assert [(m.in_features, m.out_features) for m in lin] == [
            (N_FEATURES, 16), (16, 16), (16, len(SHIFTS) if name == "actor" else 1)
        ]  # fmt: skip
        for m, g in zip(lin, gains[name], strict=True):
            w = m.weight.detach().numpy()
            small = w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w  # the orthonormal side
            np.testing.assert_allclose(small, g**2 * np.eye(len(small)), atol=1e-6)
            assert not m.bias.detach().numpy().any()
    x = torch.zeros((3, N_FEATURES), dtype=torch.float64)
    act = torch.tensor([0, 4, 8])
    a, lp, ent, v = agent.get_action_and_value(x, act)
    dist = Categorical(logits=agent.actor(x))
    assert torch.equal(a, act)
    torch.testing.assert_close(lp, dist.log_prob(act))
    torch.testing.assert_close(ent, dist.entropy())
    torch.testing.assert_close(v, agent.critic(x))
    torch.testing.assert_close(agent.get_value(x), agent.critic(x))
