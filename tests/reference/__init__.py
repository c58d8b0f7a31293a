"""PyTorch oracles for the parity tests: how to import and run the reference implementations
(the authors' code, diffusers, transformers) on CPU. Test-only; vidax never imports these."""
