"""vidax: open video-generation diffusion models in JAX/Flax, loaded from the authors'
PyTorch checkpoints.

    import vidax
    dit = vidax.load("wan2_1", "dit", "Wan2.1-T2V-1.3B/", variant="t2v-1.3b")
    forward = vidax.compiled(dit)               # one XLA program per input shape
    report = vidax.verify("wan2_1", "dit", "Wan2.1-T2V-1.3B/", variant="t2v-1.3b")
    print(report)                               # what matched, what was ignored, and why

    pipe = vidax.pipeline("wan2_1", "Wan2.1-T2V-1.3B")      # a release folder
    frames = pipe("a red fox in the snow", frames=81, size=(832, 480), seed=0)
    pipe.write(frames, "fox.mp4")
    frames = pipe("...", step_cache=vidax.StepCache("first-block", threshold=0.05))

``config``, ``load``, ``load_with_report``, ``verify`` and ``compiled`` are
``vidax.loading``'s (docs/loading_weights.md); ``pipeline`` is ``vidax.pipelines``';
``StepCache`` is ``vidax.nn.step_cache``'s (docs/step_cache.md).
"""

__version__ = "0.1.0"
__all__ = ["StepCache", "compiled", "config", "load", "load_with_report", "pipeline", "verify"]


def __getattr__(name):
    # The API pulls in JAX; import it on first use so `vidax models` / `inspect` stay quick.
    if name == "pipeline":
        from vidax import pipelines

        return pipelines.pipeline
    if name == "StepCache":
        from vidax.nn.step_cache import StepCache

        return StepCache
    if name in __all__:
        from vidax import loading

        return getattr(loading, name)
    raise AttributeError(f"module 'vidax' has no attribute {name!r}")
