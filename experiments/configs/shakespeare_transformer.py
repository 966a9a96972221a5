"""IST by width on a character-level transformer over Shakespeare's plays (issue 34).

nanoGPT's CPU setting at a quarter of its width: 4 layers, 4 heads, width 128, context 64; each of W = 2 workers
trains half the heads and feed-forward units of every layer for K = 10 steps of B = 32 windows a round.

    istjax train --config=experiments/configs/shakespeare_transformer.py
"""

from istjax.launch.config import default_config, use_model


def get_config():
    c = default_config()
    c.name = "shakespeare_transformer"
    use_model(c, "transformer", num_layers=4, embed_dim=128, num_heads=4, mlp_dim=512, context=64, split="width",
              scaling="train")
    c.data.name = "shakespeare"
    c.data.kwargs.context = 64
    c.data.kwargs.num_val_windows = 512
    c.algorithm.name = "ist"
    c.num_workers = 2
    c.local_steps = 10
    c.batch_size = 32
    c.num_rounds = 100
    c.optimizer = "adam"
    c.learning_rate = 2e-3
    c.eval_every = 20
    c.eval_batch_size = 256
    c.eval_train_examples = 512
    c.checkpoint_every = 50
    c.target_accuracy = None
    return c
