"""Your own data, the worked example of docs/your_data.md: scikit-learn's breast-cancer table as an istjax Dataset.

569 tumours, 30 measured features each, two classes (malignant 0, benign 1). `from_arrays` holds out a stratified
quarter as the test split (142 examples), standardises every feature with the training split's statistics and checks
shapes and labels. Train on it from the command line with ``--config.data.module`` (the config
``experiments/configs/breast_cancer.py`` sets it) or call the function from Python.
"""

import istjax


def breast_cancer(test_fraction: float = 0.25, seed: int = 0) -> istjax.data.Dataset:
    """The breast-cancer table, split ``1 - test_fraction`` / ``test_fraction`` (stratified, ``seed``)."""
    from sklearn.datasets import load_breast_cancer

    x, y = load_breast_cancer(return_X_y=True)
    return istjax.data.from_arrays(x, y, test_fraction=test_fraction, seed=seed, name="breast_cancer")
