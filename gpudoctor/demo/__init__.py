"""The bundled demo workload (`gpudoctor demo`): a training loop starved by its input pipeline."""
