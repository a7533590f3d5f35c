"""The benches (`ktree bench ...`): each measures one part of the product on this machine and
returns a dict its table prints. They share `summary` (quantiles, medians, the table printer);
`honest` names the kernels the evaluating benches judge."""
