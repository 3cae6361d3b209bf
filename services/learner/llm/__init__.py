"""The learner's LLM: a causal LM trained as a policy or a model (GLAM's PPO, KALM's grounding).

* `model.LlmPolicyModel`: the base causal LM (a local directory or a gateway model name,
  resolved as the gateway resolves it), LoRA through peft (optionally on the top N layers
  only) or full fine-tuning, fp32 on CPU / bf16 autocast where native, and named heads
  (`heads["value"]`: GLAM's MLP on the last prompt token's final hidden state);
* `scorer.score_candidates`: B prompts x K candidates in two forwards (the prompts, then
  every candidate on the prompt's shared KV cache), differentiable or not; with
  `keep_frozen` also the hidden states entering the first trained layer, from which
  `scorer.score_from_frozen` scores the same samples again running only the top layers.

GLAM's prompt format and its PPO live with the recipe (`llmrl.recipes.glam.prompt`,
`llmrl.recipes.glam.llm_ppo`), KALM's grounded LM and imagination with its own
(`llmrl.recipes.kalm.grounded_lm`, `llmrl.recipes.kalm.imagine`): they are the methods; this
package is what methods share.

The learner holds its own copy of the model: on-policy PPO needs the freshest weights. The
gateway's `score` stays the path for frozen models (its scorer runs under inference mode,
with a prefix cache across requests; this one keeps gradients, so they are separate).
"""
