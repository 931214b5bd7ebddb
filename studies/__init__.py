"""The studies that ship with fa2-tuner, installed as the package ``tuner.studies``
(found with ``importlib.resources``, so any working directory works)."""
