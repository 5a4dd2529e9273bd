"""The machinery under the concepts: what makes the code fast, small, distributed or observable.

A student reads the concept files at the root (train, agent, envs, batch, algorithm, grpo, ...);
nothing here changes what they compute, only how:

    kv_cache.py    the whole conversation's KV cache kept across turns (rollouts prefill only new tokens)
    logprobs.py    log-probs at the agent's tokens in bounded memory, a shared prompt run once
    lora.py        LoRA adapters (peft) and the reference model as the base with adapters off
    gguf_model.py  a GGUF chat model from PyPI (SmolLM2-135M-Instruct) as a normal transformers folder
    dist.py        several processes (`accelerate launch`): sums and gathers across ranks
    timing.py      wall-clock sections of a step (prefill, decode, env, forward, backward, ...)
    signals.py     the run's instruments: learning signals per step, alarms with their fixes, credit per turn
"""
