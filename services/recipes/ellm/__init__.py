"""ELLM (Du et al., ICML 2023): exploration goals suggested by a language model from a caption
of the agent's state, rewarded when the caption of what the agent did matches one."""
