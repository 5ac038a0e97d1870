"""AdaptDL's training API over pyddstore: ``import pyddstore.torch.adaptive as adl``.

A script written for ``adaptdl.torch`` runs with its import changed::

    import pyddstore.torch.adaptive as adl       # was: import adaptdl.torch as adl

    adl.init_process_group("gloo")               # over the MPI job's ranks
    model = adl.AdaptiveDataParallel(model, optimizer, lr_scheduler)
    loader = adl.AdaptiveDataLoader(dataset, batch_size=64, shuffle=True)
    loader.autoscale_batch_size(1024, local_bsz_bounds=(16, 256), gradient_accumulation=True)
    for epoch in adl.remaining_epochs_until(30):
        for x, y in loader:
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            optimizer.step()

What each name does:

* :class:`AdaptiveDataLoader`: a :class:`~pyddstore.torch.ThreadDataLoader`
  over a :class:`~pyddstore.torch.DistDataset` (a plain map-style dataset is
  loaded into one), with an :class:`ElasticSampler` in AdaptDL's order;
  ``batch_size`` is the global batch size.
* :meth:`AdaptiveDataLoaderHelper.autoscale_batch_size`: the local batch size and
  the gradient-accumulation steps are chosen while training to maximise
  goodput, as in Pollux (see :mod:`pyddstore.torch.adaptive.goodput`), from the step
  times this loader measures and the gradient statistics
  :class:`AdaptiveDataParallel` gathers. Every rank applies the same choice,
  at an optimizer-step boundary.
* :class:`AdaptiveDataParallel`: torch's ``DistributedDataParallel`` whose
  communication hook measures each bucket's squared norm before and after the
  all-reduce (the gradient DDP applies is bit for bit the one of the default
  hook), plus one all-reduce of a single number per optimizer step; it also
  runs gradient accumulation behind the script's back (no all-reduce, no
  ``optimizer.step``/``zero_grad`` on accumulation steps) and scales the
  learning rate (:class:`AdaScale` by default).
* :class:`ElasticSampler`: AdaptDL's ``ElasticSampler(dataset, shuffle=True)``
  (:class:`pyddstore.torch.sampler.ElasticSampler` in ``mode="adaptdl"``:
  AdaptDL's order, an index past the dataset's end is a later pass), which
  AdaptiveDataLoader uses.
* ``remaining_epochs_until``, ``current_epoch``, ``finished_epochs``,
  ``current_dataloader``, :class:`Accumulator`: AdaptDL's epoch loop and
  metric helpers.

Restart: AdaptDL checkpoints itself when its scheduler restarts a job; here
the script saves ``loader.state_dict()`` (with its model and optimizer) at an
optimizer step and calls ``loader.load_state_dict()`` after the restart, on
any number of ranks: the epoch, the position in it (the batch being trained
on when the state is taken counts as consumed), the dataloader loops
already finished in the epoch, the batch-size schedule, the measured
profile and gradient statistics all continue.

Not carried over: AdaptDL's scheduler, which changes the number of replicas
of a running job (here the job runs on the ranks ``mpiexec`` started; a
restart on another number is the user's choice), its automatic checkpoint
(``adaptdl.checkpoint``), mixed-precision scaler hooks (``mp_scaler``) and
the ``AdamScale``/``LEGWScale`` rules.
"""

from .._lazy import lazy_names as _lazy_names

# Each public name lives in one module of this package (AdaptDL's layout:
# adaptdl.torch.data, .parallel, .accumulator, .epoch); it is imported on
# first use (PEP 562), so that pyddstore.torch.adaptive.batchsize, .resume and
# .goodput can be used without the rest.
_LAZY = {
    "Accumulator": "accumulator",
    "AdaScale": "parallel",
    "AdaptiveDataLoader": "data",
    "AdaptiveDataLoaderHelper": "data",
    "AdaptiveDataLoaderMixin": "data",
    "AdaptiveDataParallel": "parallel",
    "ElasticSampler": "data",
    "LinearScale": "parallel",
    "ScalingRuleBase": "parallel",
    "SqrtScale": "parallel",
    "current_dataloader": "epoch",
    "current_epoch": "epoch",
    "finished_epochs": "epoch",
    "init_process_group": "_state",
    "remaining_epochs_until": "epoch",
    "reset": "_state",
}


__getattr__, __dir__ = _lazy_names(globals(), _LAZY)


__all__ = [
    "Accumulator",
    "AdaScale",
    "AdaptiveDataLoader",
    "AdaptiveDataLoaderHelper",
    "AdaptiveDataLoaderMixin",
    "AdaptiveDataParallel",
    "ElasticSampler",
    "LinearScale",
    "ScalingRuleBase",
    "SqrtScale",
    "current_dataloader",
    "current_epoch",
    "finished_epochs",
    "init_process_group",
    "remaining_epochs_until",
    "reset",
]
