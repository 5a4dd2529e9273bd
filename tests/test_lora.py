"""LoRA: the adapted policy starts at the base, only adapters train, the reference is the base with
adapters off, the chunked log-probs go through the adapters, and a saved adapter folder reloads."""

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from machinery import lora
from machinery.logprobs import agent_logprobs, full_logprobs, predicting_positions


def base_model():
    torch.manual_seed(0)
    return Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=200,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
        )
    )


def batch():
    ids = torch.randint(0, 200, (2, 16), generator=torch.Generator().manual_seed(0))
    attn = torch.ones_like(ids)
    mask = torch.zeros((2, 16))
    mask[:, 8:] = 1
    return ids, attn, mask


def train_a_little(model, ids, attn, rows, cols):
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(3):
        lp, _ = agent_logprobs(model, ids, attn, rows, cols)
        opt.zero_grad()
        (-lp.mean()).backward()
        opt.step()


def test_adapters_start_at_the_base_and_the_reference_stays_the_base(tmp_path):
    ids, attn, mask = batch()
    rows, cols = predicting_positions(mask)
    base_lp, _ = agent_logprobs(base_model(), ids, attn, rows, cols)
    model = lora.add_adapters(base_model(), rank=4)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)  # the base is frozen
    torch.testing.assert_close(agent_logprobs(model, ids, attn, rows, cols)[0], base_lp)  # B = 0

    train_a_little(model, ids, attn, rows, cols)
    lp, _ = agent_logprobs(model, ids, attn, rows, cols)
    assert (lp - base_lp).abs().max() > 1e-3  # the adapters moved the policy ...
    with lora.reference(model):  # ... and with them off it is the base again
        torch.testing.assert_close(agent_logprobs(model, ids, attn, rows, cols)[0], base_lp)
    # the chunked path through the adapters equals the model's own forward
    torch.testing.assert_close(lp, full_logprobs(model, ids, attn)[0][rows, cols], rtol=1e-5, atol=1e-5)

    model.save_pretrained(str(tmp_path))
    assert lora.is_adapter(str(tmp_path)) and not (tmp_path / "model.safetensors").exists()
    again = lora.load_adapters(base_model(), str(tmp_path))
    torch.testing.assert_close(agent_logprobs(again, ids, attn, rows, cols)[0], lp)


def test_lora_training_saves_adapters_that_eval_and_resume_load(tmp_path):
    """train.py --lora-rank: only the adapters train and are saved; eval.py's loader rebuilds the
    trained policy from them; --resume continues from them."""
    from config import load_agent
    from train import Config, train

    cfg = Config(
        steps=1,
        tasks_per_step=2,
        group_size=2,
        minibatch_size=4,
        eval_episodes=0,
        rounds="2",
        out=str(tmp_path / "run"),
        lora_rank=4,
        lr=5e-2,
    )
    train(cfg)
    ckpt = str(tmp_path / "run" / "checkpoint")
    assert lora.is_adapter(ckpt) and not (tmp_path / "run" / "checkpoint" / "model.safetensors").exists()
    policy = load_agent(cfg, "cpu", model=ckpt)
    base = load_agent(cfg, "cpu", model=lora.base_of(ckpt))
    moved = [
        (a - b).abs().max().item()
        for a, b in zip(policy.model.merge_and_unload().parameters(), base.model.parameters())
    ]
    assert max(moved) > 0  # the loaded policy is the trained one, not the base
    train(Config(**{**cfg.__dict__, "steps": 2, "resume": ckpt}))
    assert len(open(tmp_path / "run" / "metrics.jsonl").readlines()) == 2
