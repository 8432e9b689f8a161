"""RoPE: scalings for context extension (PI, NTK, dynamic NTK, YaRN), applying them, passkey and long-PPL commands."""
