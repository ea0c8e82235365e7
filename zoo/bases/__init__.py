"""What two families of one line do alike (Cosmos-Predict2.5 and Cosmos3; HunyuanVideo 1.0 and 1.5)."""
