"""Optimizers by config name."""
import torch


def sgd(params, cfg):
    return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.optim.momentum, weight_decay=cfg.optim.weight_decay)


def adam(params, cfg):
    return torch.optim.Adam(params, lr=cfg.lr, betas=tuple(cfg.optim.betas), weight_decay=cfg.optim.weight_decay)


OPTIMIZERS = {"sgd": sgd, "adam": adam}


def build_optimizer(params, cfg) -> torch.optim.Optimizer:
    return OPTIMIZERS[cfg.optim.name](params, cfg)
