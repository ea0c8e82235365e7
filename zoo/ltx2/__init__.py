"""LTX-2.x (Lightricks/LTX-2, LTX-2.3, LTX-2.5): joint audio+video generation components.

| module | what | reference |
|---|---|---|
| `config` | frozen configs, `from_hf_config` (+ official metadata for the DiT) | the diffusers classes below |
| `transformer` | the audio+video DiT (`LTX2Transformer`, `DiTInputs`) | `LTX2VideoTransformer3DModel` |
| `rope` | host-built RoPE coordinates and tables (video, audio, cross-modal; 1-D for connectors) | `LTX2AudioVideoRotaryPosEmbed` |
| `text` | Gemma prompt tokens (`<bos>` conventions), stacked hidden states | `LTX2Pipeline._get_gemma_prompt_embeds` |
| `connectors` | text connectors with registers | `LTX2TextConnectors` |
| `vae` | video VAE encode / decode | `AutoencoderKLLTX2Video` |
| `audio` | audio VAE decoder, vocoders (plain, BWE) | `AutoencoderKLLTX2Audio`, `LTX2Vocoder(WithBWE)` |
| `diffusion_decoder` | LTX-2.5's diffusion VAE decoder (its blocked 3-D neighborhood attention: `vidax.zoo.compute.kernels.neighborhood`) | `LTX2VideoDiffusionDecoderModel` |
| `latents`, `guidance` | packing, normalisation, I2V conditioning; guidance passes and their combination; sampler inputs | `LTX2Pipeline` / `LTX2ImageToVideoPipeline` |
| `media` | the I2V image's H.264 re-compression (`--image-crf`) | |
| `sharding` | the DiT's placement under the shared rules | |
| `family` | the family contract: settings, encode, the audio+video `sample`, decode with the soundtrack | `LTX2Pipeline` / `LTX2ImageToVideoPipeline` |

The Gemma 3 / Gemma 4 text towers are shared: `vidax.zoo.parts.encoders.gemma`. Import from the submodules;
this package imports nothing itself so that loading one part never pulls in the others.
"""
