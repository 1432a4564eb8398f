"""RLlib algorithms with NERS replay."""
