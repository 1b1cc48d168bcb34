"""pipewright-export: capture a PyTorch nn.Module with torch.fx, cut it into TorchScript nodes
at the modules its forward calls, and write a pipewright model (docs/your-own-model.md)."""

__version__ = "0.1.0"
