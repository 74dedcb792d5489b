"""Quiets jaxlib's C++ logging, which reads TF_CPP_MIN_LOG_LEVEL once, when its library
loads: without it every process prints XLA's INFO lines about its devices.

`s2s_runtime.xla` imports this module just before jaxlib, so the level is set first; a
value the user set wins. Emitted modules never import it (nor jaxlib).
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
