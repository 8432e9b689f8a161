"""Weight quantization as a reversible transform: ``with QuantizedWeights(model, "int8"):`` (see transform)."""
